#pragma once
// Shared by the libFuzzer harnesses (one per parser of outside input; run by
// scripts/fuzz.sh). The parsers read files, so each input is written to a
// private scratch directory first. A parser may reject an input only the way a
// user is told: an occ::Error whose message is one non-empty line. Anything
// else -- another exception type escaping, a crash, a sanitizer report, an
// allocation past libFuzzer's limit, a hang -- is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"

namespace occ::fuzz {

// This process's scratch directory (under /dev/shm when there is one, so the
// writes cost no disk I/O), removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::error_code ec;
    const std::string base =
        std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    std::string path = base + "/occ-fuzz-XXXXXX";
    if (!mkdtemp(path.data())) {
      std::perror("occ fuzz: mkdtemp");
      std::abort();
    }
    return path;
  }();
  static const bool cleanup_registered = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return true;
  }();
  (void)cleanup_registered;
  return dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(("occ fuzz: cannot write " + path).c_str());
    std::abort();
  }
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Two files from one input: a little-endian uint16 length L, then the first
// file's L bytes (fewer when the input ends first), then the second file.
struct TwoParts {
  std::string_view first, second;
};
inline TwoParts split_two(std::string_view in) {
  if (in.size() < 2) return {in, {}};
  size_t len = size_t(uint8_t(in[0])) | size_t(uint8_t(in[1])) << 8;
  in.remove_prefix(2);
  len = std::min(len, in.size());
  return {in.substr(0, len), in.substr(len)};
}

// Runs the parser; an occ::Error is the expected way to refuse, as long as
// its message is one non-empty line.
template <class F>
void parse_or_refuse(F&& parse) {
  try {
    parse();
  } catch (const occ::Error& e) {
    const std::string message = e.what();
    if (message.empty() || message.find('\n') != std::string::npos || message.find('\r') != std::string::npos) {
      std::fprintf(stderr, "occ fuzz: the error message is not one line: [%s]\n", message.c_str());
      std::abort();
    }
  }
}

}  // namespace occ::fuzz
