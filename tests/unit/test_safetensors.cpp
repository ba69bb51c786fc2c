// The safetensors reader reads back what the writer wrote, and refuses each
// kind of malformed file with a one-line error naming the defect.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/safetensors.h"
#include "temp_dir.h"

namespace {

// A file from a header text and a data section, as the format lays it out.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  const uint64_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << header << data;
}

void expect_refused(const std::string& path, const std::string& needle) {
  try {
    occ::SafetensorsReader::open(path);
    ADD_FAILURE() << "accepted a file that should fail with '" << needle << "'";
  } catch (const occ::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace

TEST(Safetensors, ReadsBackWhatTheWriterWrote) {
  occ::test::TempDir dir("st");
  const float a[6] = {1.5f, -2.0f, 0.0f, 3e38f, -0.0f, 1e-40f};
  const int32_t b[3] = {-7, 0, 1 << 30};
  occ::SafetensorsWriter w;
  w.add_f32("layer.a", a, {2, 3});
  w.add_i32("b", b, {3});
  w.add_f32("empty", nullptr, {0, 4});
  w.set_metadata("format", "pt");
  w.write(dir / "m.safetensors");

  const auto r = occ::SafetensorsReader::open(dir / "m.safetensors");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"b", "empty", "layer.a"}));
  EXPECT_EQ(r.shape("layer.a"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.dtype("b"), "I32");
  const std::vector<float> got = r.read_f32("layer.a");
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(std::memcmp(got.data(), a, sizeof a), 0);
  const std::vector<char> raw = r.read_bytes("b");
  ASSERT_EQ(raw.size(), sizeof b);
  EXPECT_EQ(std::memcmp(raw.data(), b, sizeof b), 0);
  EXPECT_TRUE(r.read_f32("empty").empty());
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_THROW(r.read_f32("b"), occ::Error);        // I32, not F32
  EXPECT_THROW(r.read_f32("missing"), occ::Error);  // no such tensor
}

TEST(Safetensors, RefusesMalformedFiles) {
  occ::test::TempDir dir("st");
  const std::string p = dir / "bad.safetensors";
  const std::string eight(8, 'x');
  std::ofstream(p, std::ios::binary) << "abc";
  expect_refused(p, "shorter than the 8-byte header length");
  {
    std::ofstream f(p, std::ios::binary);
    const uint64_t len = uint64_t(1) << 40;
    f.write(reinterpret_cast<const char*>(&len), 8);
  }
  expect_refused(p, "over the format's 100 MB limit");
  {
    std::ofstream f(p, std::ios::binary);
    const uint64_t len = 1000;
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << "{}";
  }
  expect_refused(p, "runs past the end");
  write_raw(p, "[1, 2]", "");
  expect_refused(p, "not a JSON object");
  write_raw(p, R"({"t": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", eight);
  expect_refused(p, "unknown dtype");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", eight);
  expect_refused(p, "not a non-negative integer");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight);
  expect_refused(p, "8 bytes for 3 elements");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", eight);
  expect_refused(p, "outside the 8-byte data");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", eight);
  expect_refused(p, "leave a gap");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", eight);
  expect_refused(p, "overlap");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", eight);
  expect_refused(p, "4 bytes of data after the last tensor");
  write_raw(p, R"({"__metadata__": {"k": 1}})", "");
  expect_refused(p, "metadata 'k' is not a string");
  write_raw(p, R"({"t": {"dtype": "F32", "shape": [2]}})", eight);
  expect_refused(p, "lacks dtype, shape or data_offsets");
}
