// optimus-cc: GPT training with 3D parallelism and Optimus-CC communication compression.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "apps/commands/commands.h"
#include "core/error.h"
#include "core/host_allocator.h"
#include "core/numerics.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Subcommand kSubcommands[] = {
    {"preprocess", occ::cmd::preprocess, "tokenize a corpus into a Megatron .bin/.idx dataset"},
    {"train", occ::cmd::train, "train a GPT model"},
    {"launch", occ::cmd::launch, "run a training job to its end: restart it from its last good checkpoint on failure"},
    {"samples", occ::cmd::samples, "print the samples a training run reads, in its order (Megatron's)"},
    {"generate", occ::cmd::generate, "sample text from a checkpoint"},
    {"export", occ::cmd::export_checkpoint, "merge a checkpoint into safetensors, Hugging Face GPT-2 / Llama or GGUF"},
    {"import-hf", occ::cmd::import_hf, "a Hugging Face GPT-2 or Llama folder -> a checkpoint (train --finetune)"},
    {"bench", occ::cmd::bench, "time training steps and compare with the PyTorch reference"},
    {"bench-compress", occ::cmd::bench_compress, "PowerSGD compression / decompression throughput (paper Fig. 14)"},
    {"plan", occ::cmd::plan, "predict iteration time of a layout + compression plan; calibrate; choose the plan"},
    {"comm-check", occ::cmd::comm_check, "check NCCL / MPI collectives and send/receive across mpirun's ranks"},
    {"reference-dump", occ::cmd::reference_dump, "(tests) dump weights, logits and gradients for the PyTorch check"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: optimus-cc <command> [options]   (optimus-cc <command> --help for its options)\n");
  std::fprintf(out, "       optimus-cc --version   (the engine's numerics version, core/numerics.h)\n\n");
  for (const auto& s : kSubcommands) std::fprintf(out, "  %-16s %s\n", s.name, s.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("optimus-cc numerics %d\n", occ::kNumericsVersion);
    return 0;
  }
  for (const auto& s : kSubcommands) {
    if (std::string(argv[1]) != s.name) continue;
    try {
      occ::HostAllocator::huge_pages_wanted();  // a bad OCC_HUGE_PAGES is refused before any work
      return s.run(argc - 1, argv + 1);
    } catch (const occ::UsageError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    } catch (const occ::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: out of host memory (std::bad_alloc): what the flags ask for does not fit this "
                           "machine; use a smaller model, batch or count\n");
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: internal: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "error: unknown command '%s'; run 'optimus-cc --help' for the list\n", argv[1]);
  return 2;
}
