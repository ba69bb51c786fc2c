#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

namespace {

std::string lock_holder_host() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

// The lock file's text: the holder's token, then its description.
std::string read_all(int fd) {
  std::string text;
  char buf[512];
  off_t at = 0;
  for (ssize_t n; (n = ::pread(fd, buf, sizeof buf, at)) > 0 && text.size() < 4096; at += n) text.append(buf, size_t(n));
  return text;
}

}  // namespace

RunLock::RunLock(RunLock&& other) noexcept { *this = std::move(other); }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    token_ = std::move(other.token_);
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() { release(); }

void RunLock::release() {
  if (fd_ < 0) return;
  // Removed while still locked: a process that opened it meanwhile finds, once
  // it has the lock, that the path no longer names its file, and opens it again.
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

RunLock RunLock::acquire(const std::string& dir, const std::string& what, const std::string& token) {
  RunLock lock;
  lock.path_ = (std::filesystem::path(dir) / file_name()).string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    struct stat st {};
    const bool existed = ::stat(lock.path_.c_str(), &st) == 0;
    const int fd = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return RunLock{};  // an unwritable folder: the command's own checks say so
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string text = read_all(fd);
      ::close(fd);
      if (err != EWOULDBLOCK) {  // no flock here: go on unlocked, as before
        if (!existed) ::unlink(lock.path_.c_str());
        return RunLock{};
      }
      const size_t eol = text.find('\n');
      const std::string holder_token = text.substr(0, eol);
      std::string holder = eol == std::string::npos ? "" : text.substr(eol + 1);
      while (!holder.empty() && holder.back() == '\n') holder.pop_back();
      if (!token.empty() && holder_token == token) return RunLock{};  // the supervisor's own job
      if (holder.empty()) holder = "another process (it has not yet written its name)";
      fail("{} is in use by {}: two jobs writing one run folder would interleave their checkpoints; wait for that "
           "one to end (or stop it), or give another directory",
           dir, holder);
    }
    struct stat held {}, now {};
    if (::fstat(fd, &held) != 0 || ::stat(lock.path_.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);  // its holder removed it on release: take the new one
      continue;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    lock.token_ = fmt::format("{}:{}:{}", lock_holder_host(), ::getpid(), ns);
    const std::string text =
        fmt::format("{}\n{} (pid {} on {}, since {})\n", lock.token_, what, ::getpid(), lock_holder_host(), utc_now());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size())) {
      // A full disk: the lock is held all the same; a refusal then names no one.
    }
    lock.fd_ = fd;
    return lock;
  }
  fail("cannot lock {}: its lock file {} keeps being replaced; check that no other job uses the folder", dir,
       lock.path_);
}

}  // namespace occ
