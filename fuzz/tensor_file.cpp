// Fuzzes the tensor file reader (checkpoint shards, compressor state) and the
// checkpoint loader on top of it (merge_checkpoint: marker, shard metadata,
// model config, tensor shapes; what `export` and `generate` run on --load).
// Input: one flag byte, then the file. Flag bit 0 set: the header CRC trailer
// is recomputed after mutation, so that the JSON header's own validation (and
// the checkpoint metadata behind it) is reached rather than stopped by the CRC.
#include <zlib.h>

#include <filesystem>

#include "core/tensor_file.h"
#include "fuzz/fuzz_util.h"
#include "train/checkpoint_merge.h"

namespace {

std::string with_fixed_header_crc(std::string file) {
  constexpr size_t kPreamble = 16, kTrailer = 4;  // "OCCTENS1" + uint64 header length | ... | uint32 crc
  if (file.size() < kPreamble + kTrailer) return file;
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data() + 8, sizeof header_len);
  if (header_len > file.size() - kPreamble - kTrailer) return file;
  const uint32_t crc = uint32_t(crc32_z(0, reinterpret_cast<const Bytef*>(file.data() + kPreamble), header_len));
  std::memcpy(file.data() + file.size() - kTrailer, &crc, sizeof crc);
  return file;
}

template <class T>
void read_all(const occ::TensorFileReader& r, const std::string& name) {
  std::vector<T> values = r.read_vector<T>(name);
  (void)values;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) file = with_fixed_header_crc(std::move(file));

  const std::string path = fuzz::scratch_dir() + "/shard.bin";
  fuzz::write_file(path, file);
  fuzz::parse_or_refuse([&] {
    TensorFileReader r = TensorFileReader::open(path);
    (void)r.meta().dump();
    for (const std::string& name : r.names()) {
      (void)r.shape(name);
      switch (r.dtype(name)) {
        case DType::F32: read_all<float>(r, name); break;
        case DType::I32: read_all<int32_t>(r, name); break;
        case DType::I64: read_all<int64_t>(r, name); break;
        case DType::U8: read_all<uint8_t>(r, name); break;
      }
    }
    r.verify();
  });

  // The same file as the only shard (T1 P1) of a checkpoint at iteration 1.
  const std::string root = fuzz::scratch_dir() + "/checkpoint";
  const std::string shard_dir = root + "/iter_0000001/mp_rank_00_000";
  std::filesystem::create_directories(shard_dir);
  fuzz::write_file(root + "/latest_checkpointed_iteration.txt", "1\n");
  fuzz::write_file(shard_dir + "/model_optim_rng.bin", file);
  fuzz::parse_or_refuse([&] {
    MergedCheckpoint merged = merge_checkpoint(root);
    (void)merged.config.dump();
  });
  return 0;
}
