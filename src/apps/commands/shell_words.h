#pragma once
// The words of a `sh -c STRING` as the shell splits them, for `optimus-cc launch`
// to find and check the train command inside the string and to add its own
// flags there. POSIX quoting (single quotes, double quotes with their
// backslash escapes, a backslash outside quotes), comments, and the control and
// redirection operators; no expansion is performed: a word whose value only the
// shell knows ($VAR, $(...), `...`, a glob, ~) is marked, so that a caller
// refuses to read it rather than reads it wrong.
#include <cstddef>
#include <string>
#include <vector>

namespace occ::cmd {

struct ShellToken {
  enum Kind { Word, Operator, Redirect } kind = Word;
  std::string text;      // a word after quote removal; an operator's characters (";", "&&", "|", "(", "\n", ...)
  bool expands = false;  // Word: its value depends on an expansion the shell performs
  size_t begin = 0, end = 0;  // its characters in the string: [begin, end)
};

// Throws UsageError on an unterminated quote (the shell would refuse the string too).
std::vector<ShellToken> split_shell_words(const std::string& s);

// `word` as one shell word: unchanged when it needs no quoting, else in single quotes.
std::string shell_quote(const std::string& word);

}  // namespace occ::cmd
