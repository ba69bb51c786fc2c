#pragma once
// dlopen() of the first library of a list that loads, keeping every failed
// candidate's reason. dlerror() hands its message out once (a second call
// returns NULL), so the reasons are read as each dlopen fails and kept here,
// for the one-line error that names them all. No CUDA syntax: the unit tests
// check it (tests/unit/test_shared_library.cpp).
#include <dlfcn.h>

#include <string>
#include <vector>

namespace occ {

struct LoadedLibrary {
  void* handle = nullptr;  // null when no candidate loaded
  std::string why_not;     // each candidate's dlerror(), "; "-separated, when none loaded
};

inline LoadedLibrary open_first_library(const std::vector<std::string>& candidates) {
  LoadedLibrary out;
  for (const std::string& name : candidates) {
    dlerror();  // drop a stale message
    out.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle) {
      out.why_not.clear();
      return out;
    }
    const char* e = dlerror();
    out.why_not += (out.why_not.empty() ? "" : "; ") + (e ? std::string(e) : name + ": not loaded");
  }
  if (candidates.empty()) out.why_not = "no library to load";
  return out;
}

}  // namespace occ
