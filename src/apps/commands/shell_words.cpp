#include "apps/commands/shell_words.h"

#include <cctype>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace occ::cmd {

namespace {
bool blank(char c) { return c == ' ' || c == '\t'; }
// Characters that end an unquoted word (and begin an operator).
// (c != 0: strchr finds the terminator too, and a NUL would then be an operator of length 0.)
bool ends_word(char c) { return blank(c) || c == '\n' || (c != 0 && std::strchr(";&|()<>", c) != nullptr); }
}  // namespace

std::vector<ShellToken> split_shell_words(const std::string& s) {
  std::vector<ShellToken> out;
  const size_t n = s.size();
  size_t i = 0;
  auto starts = [&](const char* op) { return s.compare(i, std::strlen(op), op) == 0; };
  while (i < n) {
    const char c = s[i];
    if (blank(c) || (c == '\\' && i + 1 < n && s[i + 1] == '\n')) {
      i += blank(c) ? 1 : 2;
      continue;
    }
    if (c == '#') {  // a comment, to the end of the line
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    // A redirection: [fd digits] then its operator; the word after it is its target.
    size_t digits = i;
    while (digits < n && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
    if (digits < n && (s[digits] == '<' || s[digits] == '>' || (digits == i && starts("&>")))) {
      size_t j = digits;
      for (const char* op : {"&>>", "&>", "<<-", "<<", ">>", "<&", ">&", "<>", ">|", "<", ">"})
        if (s.compare(j, std::strlen(op), op) == 0) {
          j += std::strlen(op);
          break;
        }
      out.push_back({ShellToken::Redirect, s.substr(i, j - i), false, i, j});
      i = j;
      continue;
    }
    if (ends_word(c)) {
      const char* op = c == '\n' ? "\n" : "";
      for (const char* o : {"&&", "||", ";;", "|&", ";", "&", "|", "(", ")"})
        if (starts(o)) {
          op = o;
          break;
        }
      out.push_back({ShellToken::Operator, op, false, i, i + std::strlen(op)});
      i += std::strlen(op);
      continue;
    }
    ShellToken w{ShellToken::Word, "", false, i, i};
    if (c == '~') w.expands = true;  // a home directory
    while (i < n && !ends_word(s[i])) {
      const char d = s[i];
      if (d == '\'') {
        const size_t close = s.find('\'', i + 1);
        if (close == std::string::npos)
          throw UsageError("launch: the sh -c string has an unterminated ' quote; close it");
        w.text += s.substr(i + 1, close - i - 1);
        i = close + 1;
      } else if (d == '"') {
        ++i;
        for (;; ++i) {
          if (i >= n) throw UsageError("launch: the sh -c string has an unterminated \" quote; close it");
          if (s[i] == '"') break;
          if (s[i] == '\\' && i + 1 < n && std::strchr("$`\"\\\n", s[i + 1])) {
            if (s[i + 1] != '\n') w.text += s[i + 1];
            ++i;
            continue;
          }
          if (s[i] == '$' || s[i] == '`') w.expands = true;
          w.text += s[i];
        }
        ++i;
      } else if (d == '\\') {
        if (i + 1 < n && s[i + 1] != '\n') w.text += s[i + 1];
        i += 2;
      } else {
        if (std::strchr("$`*?[{", d)) w.expands = true;  // parameters, commands, globs, braces
        w.text += d;
        ++i;
      }
    }
    w.end = std::min(i, n);
    out.push_back(std::move(w));
  }
  return out;
}

std::string shell_quote(const std::string& word) {
  bool plain = !word.empty();
  for (char c : word)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("_@%+=:,./-", c)) plain = false;
  if (plain) return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace occ::cmd
