#include "worker/train/checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "common/crc32c.h"
#include "gtest/gtest.h"
#include "tests/worker/train/tiny_trainer.h"
#include "worker/train/trainer.h"

namespace gasloc {
namespace {

std::shared_ptr<const ArenaLayout> Layout(int rows) {
  return std::make_shared<ArenaLayout>(std::vector<TensorSpec>{
      {"w", {rows, 3}, true}, {"b", {3}, false}});
}

void Fill(FloatArena* a, float base) {
  for (size_t i = 0; i < a->size(); ++i) a->data()[i] = base + 0.25f * i;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ckpt_test." + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "run.ckpt").string();
    Fill(&params_, 1.0f);
    Fill(&m_, -2.0f);
    Fill(&v_, 3.0f);
    extras_.buffers["outer.y_prev"] = {1.5f, -2.5f, 3.5f};
    extras_.buffers["empty"] = {};
    extras_.values["round"] = "17";
    extras_.values["job"] = std::string("id\0with-nul", 11);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  CheckpointView View() {
    CheckpointView view;
    view.config = {.layers = 2, .d_model = 8, .heads = 2, .context = 16};
    view.params = &params_;
    view.adam_m = &m_;
    view.adam_v = &v_;
    view.adam_step = 41;
    view.step = 42;
    view.data_cursor = 672;
    view.extras = &extras_;
    return view;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::shared_ptr<const ArenaLayout> layout_ = Layout(5);
  FloatArena params_{layout_}, m_{layout_}, v_{layout_};
  CheckpointExtras extras_;
};

TEST_F(CheckpointTest, RoundTripsEverything) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  // Only the final file remains (the temporary was renamed).
  int files = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator(dir_))
    ++files;
  EXPECT_EQ(files, 1);

  auto state = ReadCheckpoint(path_, layout_);
  ASSERT_TRUE(state.ok()) << state.status();
  const CheckpointState& s = **state;
  EXPECT_EQ(s.config.layers, 2);
  EXPECT_EQ(s.config.d_model, 8);
  EXPECT_EQ(s.config.heads, 2);
  EXPECT_EQ(s.config.context, 16);
  EXPECT_EQ(s.adam_step, 41u);
  EXPECT_EQ(s.step, 42u);
  EXPECT_EQ(s.data_cursor, 672u);
  for (size_t i = 0; i < params_.size(); ++i) {
    ASSERT_EQ(s.params.data()[i], params_.data()[i]);
    ASSERT_EQ(s.adam_m.data()[i], m_.data()[i]);
    ASSERT_EQ(s.adam_v.data()[i], v_.data()[i]);
  }
  EXPECT_EQ(s.extras.buffers, extras_.buffers);
  EXPECT_EQ(s.extras.values, extras_.values);

  auto config = ReadCheckpointConfig(path_);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->d_model, 8);

  // Overwriting replaces the file atomically with the new state.
  CheckpointView view = View();
  view.step = 43;
  view.extras = nullptr;
  ASSERT_TRUE(WriteCheckpoint(path_, view).ok());
  auto again = ReadCheckpoint(path_, layout_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->step, 43u);
  EXPECT_TRUE((*again)->extras.buffers.empty());
}

// A worker SIGKILLed mid-write leaves `<path>.tmp.<hex>` behind (the soak
// of issue 18 found them piling up in checkpoint folders): the next write
// of the same path removes them, unlinks a planted link without touching
// its target, and leaves every other name alone.
TEST_F(CheckpointTest, AWriteRemovesTheTemporariesOfAKilledWrite) {
  namespace fs = std::filesystem;
  auto make = [](const fs::path& p) { std::ofstream(p) << "partial"; };
  const fs::path stale = path_ + ".tmp.0123456789abcdef";
  const fs::path link = path_ + ".tmp.fedcba9876543210";
  const fs::path outside = dir_ / "outside.txt";
  const fs::path other_job = dir_ / "other.ckpt.tmp.0123456789abcdef";
  const fs::path not_ours = path_ + ".tmp.keep-me";
  make(stale);
  make(outside);
  make(other_job);
  make(not_ours);
  fs::create_symlink(outside, link);
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(fs::symlink_status(link)));
  EXPECT_TRUE(fs::exists(outside)) << "the link's target was removed";
  EXPECT_TRUE(fs::exists(other_job));
  EXPECT_TRUE(fs::exists(not_ours));
  size_t temporaries = 0;
  for (const auto& entry : fs::directory_iterator(dir_))
    temporaries +=
        entry.path().filename().string().rfind("run.ckpt.tmp.", 0) == 0;
  EXPECT_EQ(temporaries, 1u) << "only not_ours";
  auto state = ReadCheckpoint(path_, layout_);
  EXPECT_TRUE(state.ok()) << state.status();
}

TEST_F(CheckpointTest, RefusesAFlippedByteAnywhere) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  const std::string good = ReadAll(path_);
  // Every byte after the magic, version and length fields.
  for (size_t pos = 24; pos < good.size(); pos += 7) {
    std::string bad = good;
    bad[pos] ^= 0x10;
    WriteAll(path_, bad);
    auto state = ReadCheckpoint(path_, layout_);
    ASSERT_EQ(state.status().code(), absl::StatusCode::kDataLoss) << pos;
    ASSERT_NE(state.status().message().find("CRC-32C mismatch"),
              std::string::npos)
        << state.status();
  }
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  WriteAll(path_, bad_magic);
  EXPECT_NE(ReadCheckpoint(path_, layout_).status().message().find("magic"),
            std::string::npos);
}

TEST_F(CheckpointTest, RefusesATruncatedFile) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  const std::string good = ReadAll(path_);
  for (size_t keep : {good.size() - 1, good.size() / 2, size_t{30}, size_t{0}}) {
    WriteAll(path_, good.substr(0, keep));
    auto state = ReadCheckpoint(path_, layout_);
    EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss) << keep;
    EXPECT_NE(state.status().message().find("damaged"), std::string::npos)
        << state.status();
  }
  WriteAll(path_, good.substr(0, good.size() - 1));
  EXPECT_NE(ReadCheckpoint(path_, layout_).status().message().find("truncated"),
            std::string::npos);
}

TEST_F(CheckpointTest, RefusesAnotherVersion) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  std::string bytes = ReadAll(path_);
  bytes[8] = 2;  // the version field follows the 8-byte magic
  WriteAll(path_, bytes);
  auto state = ReadCheckpoint(path_, layout_);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(state.status().message().find("format version 2"),
            std::string::npos)
      << state.status();
}

TEST_F(CheckpointTest, RefusesAnotherLayout) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  auto state = ReadCheckpoint(path_, Layout(6));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(state.status().message().find("another layout"), std::string::npos)
      << state.status();
  // Same sizes, other names: the fingerprint still tells them apart.
  auto renamed = std::make_shared<ArenaLayout>(std::vector<TensorSpec>{
      {"w2", {5, 3}, true}, {"b", {3}, false}});
  EXPECT_EQ(ReadCheckpoint(path_, renamed).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointTest, MissingFileAndBadArguments) {
  EXPECT_EQ(ReadCheckpoint((dir_ / "nope").string(), layout_).status().code(),
            absl::StatusCode::kNotFound);
  CheckpointView view = View();
  view.adam_m = nullptr;
  EXPECT_EQ(WriteCheckpoint(path_, view).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(
      WriteCheckpoint((dir_ / "no-such-dir" / "x.ckpt").string(), View()).ok());
}

TEST_F(CheckpointTest, RefusesANonFiniteValue) {
  params_.data()[3] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  auto state = ReadCheckpoint(path_, layout_);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(state.status().message().find("non-finite value in params (element 3)"),
            std::string::npos)
      << state.status();
  Fill(&params_, 1.0f);
  extras_.buffers["outer.y_prev"][1] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  EXPECT_EQ(ReadCheckpoint(path_, layout_).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpointExtras(path_).status().code(),
            absl::StatusCode::kDataLoss);
}

// Writes `value` at `offset` of the checkpoint and fixes its CRC-32C, so
// only the bounds checks can catch the forged field.
void Forge(const std::string& path, size_t offset, uint32_t value) {
  std::string bytes = ReadAll(path);
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
  const uint32_t crc = Crc32c(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof(crc));
  WriteAll(path, bytes);
}

// A forged name or key length (up to 4 GiB) is refused before anything is
// allocated for it, naming the field.
TEST_F(CheckpointTest, ForgedLengthsAreRefusedBeforeAllocating) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  // The first buffer (map order: "empty"): its 4-byte name length, then
  // the name.
  const size_t name_len_at =
      ReadAll(path_).find(std::string("\x05\0\0\0empty", 9));
  ASSERT_NE(name_len_at, std::string::npos);
  Forge(path_, name_len_at, 0xFFFFFFFFu);
  for (const absl::Status& status :
       {ReadCheckpoint(path_, layout_).status(),
        ReadCheckpointExtras(path_).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(status.message().find("buffer name length 4294967295"),
              std::string::npos)
        << status;
  }
  // The last key ("round") with a forged length.
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  const std::string bytes = ReadAll(path_);
  const size_t key_at = bytes.rfind("round") - 4;
  Forge(path_, key_at, 0xFFFFFFF0u);
  const absl::Status key = ReadCheckpointExtras(path_).status();
  EXPECT_NE(key.message().find("key length 4294967280"), std::string::npos)
      << key;
}

// The temporary file is made exclusively under an unpredictable name and
// never through a symbolic link: links planted at the old predictable name
// (<path>.tmp.<pid>) and at the checkpoint's own name leave their targets
// untouched.
TEST_F(CheckpointTest, NeverWritesThroughAPlantedSymlink) {
  const std::string victim = (dir_ / "victim").string();
  WriteAll(victim, "precious");
  std::filesystem::create_symlink(victim, path_ + ".tmp." +
                                              std::to_string(::getpid()));
  std::filesystem::create_symlink(victim, path_);
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  EXPECT_EQ(ReadAll(victim), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(path_));
  EXPECT_TRUE(ReadCheckpoint(path_, layout_).ok());
  // No temporary file is left behind, and none is readable by others.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 3);  // victim, the planted link, the checkpoint
  EXPECT_EQ(std::filesystem::status(path_).permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::none);
}

TEST_F(CheckpointTest, ExtrasAloneReadBack) {
  ASSERT_TRUE(WriteCheckpoint(path_, View()).ok());
  auto extras = ReadCheckpointExtras(path_);
  ASSERT_TRUE(extras.ok()) << extras.status();
  EXPECT_EQ(extras->buffers, extras_.buffers);
  EXPECT_EQ(extras->values, extras_.values);
}

// A load that fails (a truncated file, a non-finite value, outer state the
// caller refuses) leaves the trainer bit-identical: its parameters, AdamW
// state, step counts and data cursor, compared as the bytes of a
// checkpoint saved before and after the failed load.
TEST(TrainerCheckpointLoad, AFailedLoadLeavesTheTrainerBitIdentical) {
  const v1::JobSpec spec = testing::TinySpec();
  auto trainer = testing::MakeTrainerOf(spec);
  ASSERT_NE(trainer, nullptr);
  const std::string good = testing::TempPath("ckpt-good");
  const std::string cut = testing::TempPath("ckpt-cut");
  const std::string nan = testing::TempPath("ckpt-nan");
  const std::string before = testing::TempPath("ckpt-before");
  const std::string after = testing::TempPath("ckpt-after");
  CheckpointExtras outer;
  outer.values["round"] = "3";
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(trainer->Step().ok());
  ASSERT_TRUE(trainer->SaveCheckpoint(good, outer).ok());
  const std::string bytes = ReadAll(good);
  WriteAll(cut, bytes.substr(0, bytes.size() / 2));  // half written
  {
    auto poisoned = testing::MakeTrainerOf(spec);
    ASSERT_NE(poisoned, nullptr);
    poisoned->params().data()[5] = std::numeric_limits<float>::quiet_NaN();
    ASSERT_TRUE(poisoned->SaveCheckpoint(nan, outer).ok());
  }
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(trainer->Step().ok());
  ASSERT_TRUE(trainer->SaveCheckpoint(before, outer).ok());

  EXPECT_EQ(trainer->LoadCheckpoint(cut).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(trainer->LoadCheckpoint(nan).status().code(),
            absl::StatusCode::kDataLoss);
  const CheckpointCheck refuse = [](const CheckpointExtras& extras) {
    EXPECT_EQ(extras.values.at("round"), "3");
    return absl::DataLossError("outer state refused");
  };
  EXPECT_EQ(trainer->LoadCheckpoint(good, refuse).status().code(),
            absl::StatusCode::kDataLoss);

  ASSERT_TRUE(trainer->SaveCheckpoint(after, outer).ok());
  EXPECT_TRUE(ReadAll(before) == ReadAll(after));
  // The good one still loads, and changes the state.
  ASSERT_TRUE(trainer->LoadCheckpoint(good).ok());
  ASSERT_TRUE(trainer->SaveCheckpoint(after, outer).ok());
  EXPECT_TRUE(ReadAll(good) == ReadAll(after));
  for (const std::string& p : {good, cut, nan, before, after})
    std::filesystem::remove(p);
}

}  // namespace
}  // namespace gasloc

