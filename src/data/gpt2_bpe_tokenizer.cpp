#include "data/gpt2_bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace occ {

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Length of the valid UTF-8 sequence at s[i], or 0 when there is none there.
// With `consumed` set to the bytes a decoder would take before giving up (the
// WHATWG "maximal subpart"), so that each invalid stretch is one U+FFFD.
size_t utf8_sequence(const std::string& s, size_t i, size_t& consumed) {
  const auto b = uint8_t(s[i]);
  consumed = 1;
  if (b < 0x80) return 1;
  int need = 0;
  uint8_t lower = 0x80, upper = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) need = 1;
  else if (b == 0xE0) need = 2, lower = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
  else if (b == 0xED) need = 2, upper = 0x9F;
  else if (b == 0xF0) need = 3, lower = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) need = 3;
  else if (b == 0xF4) need = 3, upper = 0x8F;
  else return 0;
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    if (j >= s.size() || uint8_t(s[j]) < lower || uint8_t(s[j]) > upper) {
      consumed = j - i;
      return 0;
    }
    lower = 0x80, upper = 0xBF;
  }
  return j - i;
}

// Valid UTF-8: every invalid stretch replaced by U+FFFD.
std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t consumed = 0;
    const size_t n = utf8_sequence(s, i, consumed);
    if (n > 0) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += consumed;
    }
  }
  return out;
}

// Code points of valid UTF-8 (the vocabulary's symbols); false when not valid.
bool code_points(const std::string& s, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    size_t consumed = 0;
    const size_t n = utf8_sequence(s, i, consumed);
    if (n == 0) return false;
    uint32_t cp = n == 1 ? uint8_t(s[i]) : uint8_t(s[i]) & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) cp = cp << 6 | (uint8_t(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return true;
}

// A string taken from a file, fit for a one-line message.
std::string shown_entry(const std::string& s) { return printable(s, 40); }

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  OCC_CHECK(in.good(), "cannot open {} {}; check the path", flag, path);
  std::ostringstream text;
  text << in.rdbuf();
  OCC_CHECK(!in.bad(), "cannot read {} {}; check the file", flag, path);
  return text.str();
}

// GPT-2's pattern with JavaScript's \s (what gpt-3-encoder runs) spelled out:
// PCRE2's Unicode \s differs from it on U+0085 and U+FEFF.
constexpr const char* kWhitespace = R"(\t\n\x{0B}\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF})";

}  // namespace

struct Gpt2BpeTokenizer::Pattern {
  pcre2_code* code = nullptr;
  explicit Pattern(const std::string& expression) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expression.c_str()), expression.size(),
                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      fail("internal: GPT-2 pattern does not compile at {}: {}", offset, reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // faster where the JIT exists; interpreted otherwise
  }
  ~Pattern() { pcre2_code_free(code); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
};

Gpt2BpeTokenizer::Gpt2BpeTokenizer() = default;
Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::load(const std::string& vocab_file, const std::string& merge_file) {
  std::unique_ptr<Gpt2BpeTokenizer> t(new Gpt2BpeTokenizer());
  t->vocab_file_ = vocab_file;
  t->merge_file_ = merge_file;

  // The 256 byte symbols: printable Latin-1 bytes stand for themselves, the
  // others (controls, space, 0x7F-0xA0, 0xAD) for 256, 257, ... in byte order.
  {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? uint32_t(b) : next++;
      append_utf8(t->byte_symbol_[size_t(b)], cp);
      t->symbol_byte_[cp] = uint8_t(b);
    }
  }

  // Vocabulary.
  const nlohmann::json vocab = nlohmann::json::parse(read_file(vocab_file, "--vocab-file"), nullptr, false);
  OCC_CHECK(vocab.is_object() && !vocab.empty(),
            "--vocab-file {} is not a JSON object of tokens to ids; pass GPT-2's encoder.json (vocab.json)", vocab_file);
  const size_t n = vocab.size();
  OCC_CHECK(n <= size_t(INT_MAX / 2), "--vocab-file {} has {} tokens, too many", vocab_file, n);
  t->decoder_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  std::vector<uint32_t> cps;
  for (const auto& [token, id] : vocab.items()) {
    OCC_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < int64_t(n),
              "--vocab-file {}: token '{}' has id {}, not an integer in [0, {}); ids must number the tokens 0..N-1",
              vocab_file, shown_entry(token), shown_entry(id.dump()), n);
    const auto i = size_t(id.get<int64_t>());
    OCC_CHECK(!seen[i], "--vocab-file {}: id {} is given to two tokens; ids must be unique", vocab_file, i);
    OCC_CHECK(!token.empty() && code_points(token, cps),
              "--vocab-file {}: token {} is empty or not UTF-8; the file is damaged", vocab_file, i);
    for (uint32_t cp : cps)
      OCC_CHECK(t->symbol_byte_.count(cp),
                "--vocab-file {}: token '{}' (id {}) has a character that is not one of GPT-2's 256 byte symbols; "
                "pass a byte-level BPE vocabulary",
                vocab_file, shown_entry(token), i);
    seen[i] = true;
    t->decoder_[i] = token;
    t->encoder_.emplace(token, int32_t(i));
  }
  for (int b = 0; b < 256; ++b)
    OCC_CHECK(t->encoder_.count(t->byte_symbol_[size_t(b)]),
              "--vocab-file {} lacks the symbol of byte {}; every byte needs one in a byte-level BPE vocabulary",
              vocab_file, b);
  if (auto it = t->encoder_.find("<|endoftext|>"); it != t->encoder_.end()) t->eod_ = it->second;

  // Merges: as GPT-2's loader reads them, the first line (the version
  // header) and the text after the last newline are not merges.
  const std::string merges = read_file(merge_file, "--merge-file");
  size_t line_start = merges.find('\n');
  for (int64_t line_no = 2, rank = 0; line_start != std::string::npos; ++line_no) {
    const size_t begin = line_start + 1;
    line_start = merges.find('\n', begin);
    if (line_start == std::string::npos) break;  // the unterminated tail
    std::istringstream fields(merges.substr(begin, line_start - begin));
    std::string left, right, extra;
    fields >> left >> right >> extra;
    OCC_CHECK(!left.empty() && !right.empty() && extra.empty(),
              "--merge-file {} line {} is not one merge ('left right'); pass GPT-2's vocab.bpe (merges.txt)",
              merge_file, line_no);
    OCC_CHECK(t->encoder_.count(left) && t->encoder_.count(right) && t->encoder_.count(left + right),
              "--merge-file {} line {} merges '{}' and '{}', which are not both in --vocab-file {} with their merge; "
              "the vocabulary and merge files do not belong together",
              merge_file, line_no, shown_entry(left), shown_entry(right), vocab_file);
    const bool fresh = t->ranks_.emplace(left + " " + right, int(rank++)).second;
    OCC_CHECK(fresh, "--merge-file {} line {} repeats an earlier merge; the file is damaged", merge_file, line_no);
  }

  std::string ws = kWhitespace;
  t->pattern_ = std::make_unique<Pattern>("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + ws +
                                          "\\p{L}\\p{N}]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+");
  return t;
}

std::string Gpt2BpeTokenizer::describe() const {
  return "GPT-2 BPE (" + vocab_file_ + ", " + merge_file_ + ")";
}

std::vector<std::string> Gpt2BpeTokenizer::pretokenize(const std::string& raw) const {
  const std::string text = sanitize_utf8(raw);
  std::vector<std::string> pieces;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(pattern_->code, nullptr);
  OCC_CHECK(md, "out of memory tokenizing text");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(pattern_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("cannot split text for GPT-2 BPE (PCRE2 error {}); the text may be too long for one document", rc);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // (no alternative matches empty; guard anyway)
      ++at;
      continue;
    }
    pieces.emplace_back(text, ov[0], ov[1] - ov[0]);
    at = ov[1];
  }
  pcre2_match_data_free(md);
  return pieces;
}

void Gpt2BpeTokenizer::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::string> symbols;
  symbols.reserve(piece.size());
  for (unsigned char b : piece) symbols.push_back(byte_symbol_[b]);
  // Merge the best-ranked adjacent pair everywhere (left to right), until no pair has a rank.
  std::vector<std::string> merged;
  while (symbols.size() > 1) {
    int best = INT_MAX;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = ranks_.find(symbols[i] + " " + symbols[i + 1]);
      if (it != ranks_.end() && it->second < best) best = it->second, best_at = i;
    }
    if (best == INT_MAX) break;
    const std::string first = symbols[best_at], second = symbols[best_at + 1];
    merged.clear();
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(symbols[i]));
        i += 1;
      }
    }
    symbols.swap(merged);
  }
  std::vector<int32_t> ids;
  ids.reserve(symbols.size());
  for (const std::string& s : symbols) ids.push_back(encoder_.at(s));  // load() checked every merge result
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() > (1u << 20)) cache_.clear();  // bounded: a corpus's common words refill it
  cache_.emplace(piece, std::move(ids));
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  for (const std::string& piece : pretokenize(text)) bpe(piece, ids);
  return ids;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string symbols;
  for (int32_t id : ids) {
    OCC_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary of {} ({} tokens); the model and "
              "tokenizer do not match", id, describe(), vocab_size());
    symbols += decoder_[size_t(id)];
  }
  std::vector<uint32_t> cps;
  code_points(symbols, cps);  // valid: load() checked every token
  std::string text;
  text.reserve(cps.size());
  for (uint32_t cp : cps) text += char(symbol_byte_.at(cp));
  return text;
}

}  // namespace occ

namespace occ {

std::vector<std::string> Gpt2BpeTokenizer::merges() const {
  std::vector<std::string> out(ranks_.size());
  for (const auto& [pair, rank] : ranks_) out[size_t(rank)] = pair;
  return out;
}

}  // namespace occ
