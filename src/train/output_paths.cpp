#include "train/output_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {
namespace {

// Creates `probe` exclusively, writes a byte and removes it; the errno of the first failure, 0 on success.
int probe_write(const std::string& probe) {
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = ::write(fd, "x", 1) == 1 ? 0 : errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (::unlink(probe.c_str()) != 0 && err == 0) err = errno;
  return err;
}

}  // namespace

void check_writable_dir(const std::string& dir, const char* flag, int rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  OCC_CHECK(!ec, "cannot create {} directory {}: {}; give a directory that can be created and written", flag, dir,
            ec.message());
  const std::string probe = fmt::format("{}/.occ-write-probe.rank{}.{}", dir, rank, int64_t(getpid()));
  const int err = probe_write(probe);
  OCC_CHECK(err == 0, "cannot write in {} directory {}: {} (a probe file failed); give a directory that can be "
            "written", flag, dir, std::strerror(err));
}

void check_writable_file(const std::string& path, const char* flag) {
  const std::string probe = fmt::format("{}.occ-write-probe.{}", path, int64_t(getpid()));
  const int err = probe_write(probe);
  OCC_CHECK(err == 0, "cannot write {} file {}: {} (a probe file beside it failed); give a path in an existing, "
            "writable directory", flag, path, std::strerror(err));
}

}  // namespace occ
