#pragma once
// Errors: every user-facing failure is an occ::Error whose message is one line
// that names the problem and the fix. The command line prints it and exits 1.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace occ {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A malformed command line (unknown flag, missing value): exit code 2.
struct UsageError : Error {
  using Error::Error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace occ

// OCC_CHECK(condition, "format {}", args...): throws occ::Error when false.
#define OCC_CHECK(cond, ...)        \
  do {                              \
    if (!(cond)) ::occ::fail(__VA_ARGS__); \
  } while (0)
