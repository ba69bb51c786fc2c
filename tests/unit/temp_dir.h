#pragma once
// A fresh directory under the system temp dir for one test, removed with
// everything in it afterwards.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace occ::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "occ") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (tag + "-XXXXXX")).string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
  std::string prefix(const std::string& name = "ds") const { return file(name); }
  std::string str() const { return path.string(); }
};

}  // namespace occ::test
