#pragma once
// Test only (the hidden --debug-dump-tokens PREFIX): every rank that feeds the
// model's inputs (the first pipeline stage, TP rank 0) writes each training sample
// it reads as one line, "iteration global_sample dataset token token ...", to
// PREFIX.rank<R>, and each sample an evaluation reads as "iteration set position
// token ..." (set: valid or test; iteration 0: the evaluation at start) to
// PREFIX.eval.rank<R>. Merged over ranks, the lines are the run's whole token
// stream, so a test can show that two layouts (or a resumed run) train on the
// same tokens, and that evaluations read on where the last one stopped.
#include <cstdint>
#include <cstdio>
#include <string>

#include "data/blended_dataset.h"

namespace occ {

class TokenDump {
 public:
  TokenDump(const std::string& prefix, int world_rank);  // throws a one-line occ::Error
  ~TokenDump();
  TokenDump(const TokenDump&) = delete;
  TokenDump& operator=(const TokenDump&) = delete;
  // Samples [first_sample, first_sample + count) of `data`, read for `iteration` (1-based).
  void record(int64_t iteration, const BlendedDataset& data, int64_t first_sample, int count);
  // The same for an evaluation of `set` ("valid" or "test") after `iteration`.
  void record_eval(int64_t iteration, const char* set, const SampleSource& data, int64_t first_sample, int count);

 private:
  std::FILE* file_ = nullptr;
  std::FILE* eval_file_ = nullptr;
  std::string path_, eval_path_;
};

}  // namespace occ
