#include "train/token_dump.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

TokenDump::TokenDump(const std::string& prefix, int world_rank)
    : path_(fmt::format("{}.rank{}", prefix, world_rank)), eval_path_(fmt::format("{}.eval.rank{}", prefix, world_rank)) {
  file_ = std::fopen(path_.c_str(), "a");
  OCC_CHECK(file_, "cannot open --debug-dump-tokens file {}: {}", path_, std::strerror(errno));
  eval_file_ = std::fopen(eval_path_.c_str(), "a");
  OCC_CHECK(eval_file_, "cannot open --debug-dump-tokens file {}: {}", eval_path_, std::strerror(errno));
}

TokenDump::~TokenDump() {
  if (file_) std::fclose(file_);
  if (eval_file_) std::fclose(eval_file_);
}

void TokenDump::record_eval(int64_t iteration, const char* set, const SampleSource& data, int64_t first_sample,
                            int count) {
  std::vector<int32_t> tokens(size_t(data.seq_length()) + 1);
  for (int64_t i = first_sample; i < first_sample + count; ++i) {
    data.sample(i, tokens.data());
    std::string line = fmt::format("{} {} {}", iteration, set, i);
    for (int32_t t : tokens) line += fmt::format(" {}", t);
    line += '\n';
    std::fputs(line.c_str(), eval_file_);
  }
  std::fflush(eval_file_);
}

void TokenDump::record(int64_t iteration, const BlendedDataset& data, int64_t first_sample, int count) {
  std::vector<int32_t> tokens(size_t(data.seq_length()) + 1);
  for (int64_t i = first_sample; i < first_sample + count; ++i) {
    data.sample(i, tokens.data());
    std::string line = fmt::format("{} {} {}", iteration, i, data.dataset_of(i));
    for (int32_t t : tokens) line += fmt::format(" {}", t);
    line += '\n';
    std::fputs(line.c_str(), file_);
  }
  std::fflush(file_);
}

}  // namespace occ
