// TensorBoard's event file: CRC-32C against its published check value, the TFRecord
// framing of what the writer wrote, and the tags a metrics row becomes. (The CLI test
// cli.tensorboard reads whole files back with a reader written apart from this code.)
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "core/error.h"
#include "train/tensorboard_log.h"
#include "train/tensorboard_writer.h"

namespace {

TEST(Crc32c, CheckValues) {
  // The CRC-32C check value (RFC 3720, and every CRC catalogue): "123456789" -> 0xE3069283.
  EXPECT_EQ(occ::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(occ::crc32c("", 0), 0u);
  // 32 zero bytes (RFC 3720 B.4): 0x8A9136AA.
  const char zeros[32] = {};
  EXPECT_EQ(occ::crc32c(zeros, 32), 0x8A9136AAu);
  const uint32_t c = occ::crc32c("123456789", 9);
  EXPECT_EQ(occ::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

uint64_t u64(const std::string& s, size_t at) {
  uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
uint32_t u32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

TEST(TensorBoardWriter, RecordsAreFramedAndFlushed) {
  occ::test::TempDir dir;
  const std::string tb = dir / "tb/nested";
  std::string path;
  {
    occ::TensorBoardWriter w(tb);
    path = w.path();
    EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
    w.add_scalars(7, 1.5e9, {{"lm loss", 2.5f}});
    w.flush();
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Two records: the file version, then the scalar event; each CRC checks.
    size_t at = 0;
    int records = 0;
    while (at < bytes.size()) {
      ASSERT_LE(at + 12, bytes.size());
      const uint64_t len = u64(bytes, at);
      EXPECT_EQ(u32(bytes, at + 8), occ::masked_crc32c(bytes.data() + at, 8));
      ASSERT_LE(at + 12 + len + 4, bytes.size());
      EXPECT_EQ(u32(bytes, at + 12 + len), occ::masked_crc32c(bytes.data() + at + 12, len));
      const std::string data = bytes.substr(at + 12, len);
      if (records == 0) {
        EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
      }
      if (records == 1) {
        EXPECT_NE(data.find("lm loss"), std::string::npos);
        float v = 2.5f;
        EXPECT_NE(data.find(std::string("\x15", 1) + std::string(reinterpret_cast<const char*>(&v), 4)), std::string::npos)
            << "simple_value (field 2, fixed32) = 2.5";
        EXPECT_EQ(data.substr(0, 1), std::string("\x09", 1)) << "wall_time first (field 1, fixed64)";
        EXPECT_EQ(data.substr(9, 2), std::string("\x10\x07", 2)) << "step 7 (field 2, varint)";
      }
      at += 12 + len + 4;
      records += 1;
    }
    EXPECT_EQ(records, 2);
  }
  // A second writer in the same folder makes its own file.
  occ::TensorBoardWriter again(tb);
  EXPECT_NE(again.path(), path);
}

TEST(TensorBoardWriter, UncreatableDirectoryIsOneLine) {
  try {
    occ::TensorBoardWriter w("/proc/occ-no-such/tb");
    FAIL() << "no error";
  } catch (const occ::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot create --tensorboard-dir /proc/occ-no-such/tb: "), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
}

TEST(TensorBoardScalars, TagsOfAMetricsRow) {
  nlohmann::json row = {{"iter", 4},           {"loss", 3.25},      {"lr", 1e-3},          {"grad_norm", 0.5},
                        {"ms", 250.0},         {"tokens_per_s", 1e3}, {"val_loss", 3.0},    {"test_loss", 3.5},
                        {"loss_scale", 1024.0}, {"bytes", {{"pp_bwd", 4096}}}, {"bytes_saved", {{"pp_bwd", 1000}}},
                        {"lep_check", {{"error_ratio", 2.0}}},
                        {"timers", {{"forward", 10.0}, {"pp_wait", 4.0}, {"iteration", 250.0}, {"peak_rss_mib", 9.0}}}};
  occ::TensorBoardOptions o;
  auto tags = [&] {
    std::map<std::string, double> m;
    for (auto& [k, v] : occ::tensorboard_scalars(row, o)) m[k] = v;
    return m;
  };
  auto m = tags();
  EXPECT_EQ(m.at("lm loss"), 3.25);
  EXPECT_EQ(m.at("learning-rate"), 1e-3);
  EXPECT_EQ(m.at("grad-norm"), 0.5);
  EXPECT_EQ(m.at("loss-scale"), 1024.0);
  EXPECT_EQ(m.at("bytes/pp_bwd"), 4096.0);
  EXPECT_EQ(m.at("bytes-saved/pp_bwd"), 1000.0);
  EXPECT_EQ(m.at("lep/error_ratio"), 2.0);
  EXPECT_EQ(m.at("lm loss validation"), 3.0);
  EXPECT_EQ(m.at("lm loss test"), 3.5);
  EXPECT_FALSE(m.count("forward-compute-time")) << "timers only with --log-timers-to-tensorboard";
  EXPECT_FALSE(m.count("lm loss validation ppl"));
  o.timers = o.validation_ppl = true;
  m = tags();
  EXPECT_EQ(m.at("forward-compute-time"), 0.010);
  EXPECT_EQ(m.at("pp-wait-time"), 0.004);
  EXPECT_EQ(m.at("iteration-time"), 0.25);
  EXPECT_FALSE(m.count("peak-rss-mib-time"));
  EXPECT_DOUBLE_EQ(m.at("lm loss validation ppl"), std::exp(3.0));
  EXPECT_DOUBLE_EQ(m.at("lm loss test ppl"), std::exp(3.5));
  o.log_interval = 3;  // iteration 4: evaluations only
  m = tags();
  EXPECT_EQ(m.size(), 4u);
  EXPECT_TRUE(m.count("lm loss validation") && m.count("lm loss test"));
}

}  // namespace
