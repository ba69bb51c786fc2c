// Fuzzes the safetensors reader (SafetensorsReader: header, dtypes, shapes,
// data offsets, coverage of the data, metadata) and reads every tensor.
#include "core/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  const std::string path = fuzz::scratch_dir() + "/model.safetensors";
  fuzz::write_file(path, fuzz::as_view(data, size));
  fuzz::parse_or_refuse([&] {
    const SafetensorsReader r = SafetensorsReader::open(path);
    for (const std::string& name : r.names()) {
      (void)r.shape(name);
      (void)r.read_bytes(name);
      if (r.dtype(name) == "F32") (void)r.read_f32(name);
    }
    (void)r.metadata().size();
  });
  return 0;
}
