#pragma once
// Subcommands of the `optimus-cc` binary. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code; user
// errors are thrown as occ::Error and printed by main().
namespace occ::cmd {

int preprocess(int argc, char** argv);
int train(int argc, char** argv);
int launch(int argc, char** argv);  // the supervisor that restarts a failed `train` job (apps/commands/launch.cpp)
int samples(int argc, char** argv);  // the samples a run reads, in its order
int generate(int argc, char** argv);
int bench(int argc, char** argv);
int bench_compress(int argc, char** argv);
int export_checkpoint(int argc, char** argv);  // `export`: merge shards into one safetensors file
int import_hf(int argc, char** argv);  // `import-hf`: a Hugging Face folder -> a checkpoint
int plan(int argc, char** argv);  // performance planner: see plan/
int comm_check(int argc, char** argv);  // `comm-check`: the communication library against known values
int reference_dump(int argc, char** argv);  // test support: see tests/reference

}  // namespace occ::cmd
