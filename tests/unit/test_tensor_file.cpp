#include "core/tensor_file.h"

#include <gtest/gtest.h>

#include "temp_dir.h"
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace occ {
namespace {

namespace fs = std::filesystem;

using TempDir = occ::test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// XORs one byte in place. No truncation: ext4 flushes a truncated-then-
// rewritten file on close, which would make the byte-flip loops slow.
void flip(const std::string& path, uint64_t pos, char mask) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(pos));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(pos));
  f.put(static_cast<char>(c ^ mask));
}

// The message of the occ::Error that `f` throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small file with every dtype; returns its path.
std::string write_sample(const TempDir& dir) {
  TensorFileWriter w({{"iteration", 42}, {"config", {{"hidden", 64}, {"name", "gpt"}}}});
  std::vector<float> f = {1.5f, -2.0f, 0.0f, std::numeric_limits<float>::infinity(), 3.25f, -0.0f};
  std::vector<int32_t> i32 = {-7, 0, 2147483647};
  std::vector<int64_t> i64 = {-1, 1ll << 40, std::numeric_limits<int64_t>::min()};
  std::vector<uint8_t> u8 = {0, 1, 255, 128, 7};
  w.add("weights", f.data(), {2, 3});
  w.add("ints", i32);
  w.add("longs", i64.data(), {3});
  w.add("bytes", u8.data(), {5});
  const int64_t scalar = 99;
  w.add("scalar", &scalar, {});
  w.add("empty", static_cast<const float*>(nullptr), {0, 4});
  const std::string path = dir.file("sample.occt");
  w.write(path);
  return path;
}

TEST(TensorFile, RoundTripsEveryDtypeAndTheMetadata) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const TensorFileReader r = TensorFileReader::open(path);
  EXPECT_EQ(r.meta()["iteration"], 42);
  EXPECT_EQ(r.meta()["config"]["name"], "gpt");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"weights", "ints", "longs", "bytes", "scalar", "empty"}));
  EXPECT_TRUE(r.has("ints"));
  EXPECT_FALSE(r.has("nope"));
  EXPECT_EQ(r.shape("weights"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.shape("scalar"), std::vector<int64_t>{});
  EXPECT_EQ(r.numel("scalar"), 1);
  EXPECT_EQ(r.numel("empty"), 0);
  EXPECT_EQ(r.dtype("longs"), DType::I64);

  float f[6];
  r.read("weights", f, 6);
  const float want[6] = {1.5f, -2.0f, 0.0f, std::numeric_limits<float>::infinity(), 3.25f, -0.0f};
  EXPECT_EQ(std::memcmp(f, want, sizeof f), 0);  // bitwise, so -0.0 and inf count
  EXPECT_EQ(r.read_vector<int32_t>("ints"), (std::vector<int32_t>{-7, 0, 2147483647}));
  EXPECT_EQ(r.read_vector<int64_t>("longs"),
            (std::vector<int64_t>{-1, 1ll << 40, std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(r.read_vector<uint8_t>("bytes"), (std::vector<uint8_t>{0, 1, 255, 128, 7}));
  EXPECT_EQ(r.read_vector<int64_t>("scalar"), std::vector<int64_t>{99});
  EXPECT_TRUE(r.read_vector<float>("empty").empty());
  r.verify();
}

TEST(TensorFile, LayoutMatchesTheSpec) {
  TempDir dir;
  const std::string bytes = slurp(write_sample(dir));
  ASSERT_EQ(bytes.substr(0, 8), "OCCTENS1");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 8, 8);
  const auto header = nlohmann::json::parse(bytes.substr(16, header_len));
  const uint64_t data_start = (16 + header_len + 63) / 64 * 64;
  EXPECT_EQ(bytes.size(), data_start + header["data_bytes"].get<uint64_t>() + 4);
  for (const auto& t : header["tensors"]) EXPECT_EQ(t["offset"].get<uint64_t>() % 64, 0u) << t["name"];
  const auto& w = header["tensors"][0];
  EXPECT_EQ(w["dtype"], "f32");
  float first = 0;
  std::memcpy(&first, bytes.data() + data_start + w["offset"].get<uint64_t>(), 4);
  EXPECT_EQ(first, 1.5f);
}

TEST(TensorFile, FlippedDataByteNamesTheTensor) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string bytes = slurp(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 8, 8);
  const auto header = nlohmann::json::parse(bytes.substr(16, header_len));
  const uint64_t data_start = (16 + header_len + 63) / 64 * 64;
  // Every byte of every tensor's payload is covered by its checksum.
  for (const auto& t : header["tensors"]) {
    const std::string name = t["name"];
    for (uint64_t i = 0; i < t["bytes"].get<uint64_t>(); ++i) {
      const uint64_t pos = data_start + t["offset"].get<uint64_t>() + i;
      flip(path, pos, 0x10);
      const TensorFileReader r = TensorFileReader::open(path);  // the header is intact
      const std::string msg = error_of([&] { r.verify(); });
      EXPECT_NE(msg.find("is corrupted (tensor '" + name + "' checksum mismatch)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("restore it or load an earlier checkpoint"), std::string::npos) << msg;
      flip(path, pos, 0x10);
    }
  }
  TensorFileReader::open(path).verify();  // restored
  flip(path, data_start + 5, 0x01);  // inside "weights"
  const TensorFileReader r = TensorFileReader::open(path);
  float f[6];
  EXPECT_NE(error_of([&] { r.read("weights", f, 6); }).find("tensor 'weights' checksum mismatch"), std::string::npos);
  EXPECT_EQ(r.read_vector<int32_t>("ints").size(), 3u);  // the other tensors still load
}

TEST(TensorFile, FlippedHeaderByteIsRejected) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string bytes = slurp(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 8, 8);
  // Every byte of magic, length, header JSON and trailing CRC matters.
  std::vector<uint64_t> positions;
  for (uint64_t i = 0; i < 16 + header_len; ++i) positions.push_back(i);
  for (uint64_t i = bytes.size() - 4; i < bytes.size(); ++i) positions.push_back(i);
  for (uint64_t pos : positions) {
    flip(path, pos, 0x01);
    const std::string msg = error_of([&] { TensorFileReader::open(path); });
    EXPECT_FALSE(msg.empty()) << "flip at byte " << pos << " went unnoticed";
    flip(path, pos, 0x01);
  }
  TensorFileReader::open(path);  // restored
  flip(path, 16 + header_len / 2, 0x01);
  const std::string msg = error_of([&] { TensorFileReader::open(path); });
  EXPECT_NE(msg.find("checkpoint file " + path + " is corrupted"), std::string::npos) << msg;
}

TEST(TensorFile, TruncationIsReportedAsSuch) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string bytes = slurp(path);
  for (size_t keep : {size_t{0}, size_t{5}, size_t{12}, size_t{40}, bytes.size() / 2, bytes.size() - 5, bytes.size() - 1}) {
    spit(path, bytes.substr(0, keep));
    const std::string msg = error_of([&] { TensorFileReader::open(path); });
    EXPECT_NE(msg.find(path + " is truncated"), std::string::npos) << "kept " << keep << ": " << msg;
  }
  spit(path, bytes + "junk");
  EXPECT_NE(error_of([&] { TensorFileReader::open(path); }).find("is corrupted"), std::string::npos);
}

TEST(TensorFile, BadMagicAndMissingFile) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  spit(path, "this is a text file, not a checkpoint at all");
  EXPECT_NE(error_of([&] { TensorFileReader::open(path); }).find("is not an optimus-cc tensor file (bad magic)"),
            std::string::npos);
  spit(path, "PK");  // shorter than the magic and not a prefix of it
  EXPECT_NE(error_of([&] { TensorFileReader::open(path); }).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of([&] { TensorFileReader::open(dir.file("absent")); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([&] { TensorFileReader::open(dir.str()); }).find("is not a regular file"), std::string::npos);
}

TEST(TensorFile, WrongShapeDtypeOrNameIsAClearError) {
  TempDir dir;
  const TensorFileReader r = TensorFileReader::open(write_sample(dir));
  std::vector<float> f(8);
  const std::string msg = error_of([&] { r.read("weights", f.data(), 8); });
  EXPECT_NE(msg.find("tensor 'weights' has 6 elements in"), std::string::npos) << msg;
  EXPECT_NE(msg.find("but this model expects 8: the checkpoint was saved with a different model shape (--hidden-size etc.)"),
            std::string::npos) << msg;
  std::vector<int32_t> i(6);
  EXPECT_NE(error_of([&] { r.read("weights", i.data(), 6); }).find("stored as f32 but read as i32"), std::string::npos);
  const std::string missing = error_of([&] { r.read("layers.0.attn.qkv.weight", f.data(), 6); });
  EXPECT_NE(missing.find("has no tensor 'layers.0.attn.qkv.weight'"), std::string::npos) << missing;
  EXPECT_NE(error_of([&] { r.shape("nope"); }).find("no tensor 'nope'"), std::string::npos);
}

TEST(TensorFile, WriteIsAtomicAndRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.file("state.occt");
  TensorFileWriter first(nlohmann::json{{"v", 1}});
  first.add("x", std::vector<float>{1, 2, 3});
  first.write(path);
  TensorFileWriter second(nlohmann::json{{"v", 2}});
  second.add("x", std::vector<float>{4, 5});
  second.write(path);  // replaces the first
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const TensorFileReader r = TensorFileReader::open(path);
  EXPECT_EQ(r.meta()["v"], 2);
  EXPECT_EQ(r.read_vector<float>("x"), (std::vector<float>{4, 5}));

  EXPECT_NE(error_of([&] { second.add("x", std::vector<float>{1}); }).find("added twice"), std::string::npos);
  float v = 0;
  EXPECT_NE(error_of([&] { second.add("neg", &v, {-1}); }).find("negative"), std::string::npos);
  EXPECT_NE(error_of([&] { second.write(dir.file("no/such/dir/f.occt")); }).find("cannot create"), std::string::npos);
}

TEST(TensorFile, WriterCopiesTheData) {
  TempDir dir;
  std::vector<int32_t> buf = {1, 2, 3};
  TensorFileWriter w;
  w.add("a", buf.data(), {3});
  buf[0] = 100;  // after add(): must not reach the file
  w.write(dir.file("a.occt"));
  EXPECT_EQ(TensorFileReader::open(dir.file("a.occt")).read_vector<int32_t>("a"), (std::vector<int32_t>{1, 2, 3}));
}

TEST(TensorFile, ViewsWriteTheSameBytesAsCopies) {
  TempDir dir;
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.25f;
  TensorFileWriter copies(nlohmann::json{{"k", 1}}), views(nlohmann::json{{"k", 1}});
  copies.add("first", values.data(), {10, 30});
  copies.add("rest", values.data() + 300, {700});
  auto owner = std::make_shared<const std::vector<float>>(values);
  views.add_view("first", owner, owner->data(), {10, 30});
  views.add_view("rest", owner, owner->data() + 300, {700});
  owner.reset();  // the writer keeps the buffer alive
  copies.write(dir.file("c.occt"));
  views.write(dir.file("v.occt"));
  std::ifstream c(dir.file("c.occt"), std::ios::binary), v(dir.file("v.occt"), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(c), {}), std::string(std::istreambuf_iterator<char>(v), {}));
  EXPECT_EQ(TensorFileReader::open(dir.file("v.occt")).read_vector<float>("rest")[1], 301 * 0.25f);
}

}  // namespace
}  // namespace occ
