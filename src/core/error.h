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

// A failure every rank of a job throws at the same point, having agreed on it
// collectively: the rank named by `reporter` prints the message (one line for
// the job), the others exit non-zero quietly, and nobody needs MPI_Abort.
struct AgreedError : Error {
  AgreedError(const std::string& message, int reporter) : Error(message), reporter(reporter) {}
  int reporter;
};

// Text from a file or the command line, made fit for a one-line message:
// control characters become '?', and more than max_chars are cut with "...".
inline std::string printable(const std::string& text, size_t max_chars = 64) {
  std::string out = text.substr(0, max_chars);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 32 || c == 127) c = '?';
  return text.size() > max_chars ? out + "..." : out;
}

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
