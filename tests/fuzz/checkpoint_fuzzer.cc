// Fuzz target: a checkpoint file as a crash, a full disk, a bad disk or
// someone with write access to the checkpoint directory could leave it.
// The input's first byte chooses fix-ups, the rest is the file: bit 0
// rewrites the header's length field to the file's size and bit 1 the
// trailing CRC-32C, so that mutations also reach the sections behind those
// two checks. The file goes through ReadCheckpointConfig,
// ReadCheckpointExtras and ReadCheckpoint (a 15-float layout,
// fuzz_fixtures.h). Properties, each a crash:
//   - a refusal is DATA_LOSS or FAILED_PRECONDITION (never an abort, a
//     bad_alloc or an allocation the file's size does not justify: ASan's
//     allocation limit catches those);
//   - a loaded state has the layout's size, and every parameter, moment
//     and buffer value is finite;
//   - the three readers agree: when ReadCheckpoint loads the file, the
//     other two do too, with the same config and extras;
//   - a loaded state written back and read again is the same state.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_seeds.h"
#include "worker/train/checkpoint.h"

namespace gasloc::fuzz {
namespace {

constexpr uint8_t kFixLength = 1, kFixCrc = 2;

// A per-process scratch directory in memory where there is one.
const std::string& ScratchDir() {
  static const std::string dir = [] {
    const std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm"
                                            : std::filesystem::temp_directory_path();
    const std::filesystem::path d =
        base / absl::StrCat("gasloc-checkpoint-fuzz.", ::getpid());
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  GASLOC_FUZZ_CHECK(f != nullptr, path);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

std::string ReadFile(const std::string& path) {
  std::string bytes;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  GASLOC_FUZZ_CHECK(f != nullptr, path);
  char block[4096];
  size_t n;
  while ((n = std::fread(block, 1, sizeof(block), f)) > 0) bytes.append(block, n);
  std::fclose(f);
  return bytes;
}

void ApplyFixUps(uint8_t mode, std::string& file) {
  if ((mode & kFixLength) && file.size() >= kCheckpointLengthOffset + 8) {
    const uint64_t size = file.size();
    std::memcpy(file.data() + kCheckpointLengthOffset, &size, 8);
  }
  if ((mode & kFixCrc) && file.size() >= 4) {
    const uint32_t crc = Crc32c(file.data(), file.size() - 4);
    std::memcpy(file.data() + file.size() - 4, &crc, 4);
  }
}

void CheckRefusal(const absl::Status& status) {
  GASLOC_FUZZ_CHECK(absl::IsDataLoss(status) ||
                        absl::IsFailedPrecondition(status),
                    status.ToString());
}

void CheckFinite(const float* values, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    GASLOC_FUZZ_CHECK(std::isfinite(values[i]),
                      absl::StrCat(what, " element ", i, " is not finite"));
}

bool SameConfig(const ModelConfig& a, const ModelConfig& b) {
  return a.layers == b.layers && a.d_model == b.d_model &&
         a.heads == b.heads && a.context == b.context;
}

bool SameState(const CheckpointState& a, const CheckpointState& b) {
  const auto same_arena = [](const FloatArena& x, const FloatArena& y) {
    return x.size() == y.size() &&
           std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  return SameConfig(a.config, b.config) && same_arena(a.params, b.params) &&
         same_arena(a.adam_m, b.adam_m) && same_arena(a.adam_v, b.adam_v) &&
         a.adam_step == b.adam_step && a.step == b.step &&
         a.data_cursor == b.data_cursor &&
         a.extras.buffers == b.extras.buffers &&
         a.extras.values == b.extras.values;
}

void CheckFile(const std::string& path) {
  const auto layout = CheckpointLayout();
  absl::StatusOr<ModelConfig> config = ReadCheckpointConfig(path);
  absl::StatusOr<CheckpointExtras> extras = ReadCheckpointExtras(path);
  absl::StatusOr<std::unique_ptr<CheckpointState>> state =
      ReadCheckpoint(path, layout);
  if (!config.ok()) CheckRefusal(config.status());
  if (!extras.ok()) CheckRefusal(extras.status());
  if (!state.ok()) {
    CheckRefusal(state.status());
    return;
  }
  const CheckpointState& s = **state;
  GASLOC_FUZZ_CHECK(config.ok() && extras.ok(),
                    "ReadCheckpoint loaded a file another reader refused");
  GASLOC_FUZZ_CHECK(SameConfig(*config, s.config), "configs differ");
  GASLOC_FUZZ_CHECK(extras->buffers == s.extras.buffers &&
                        extras->values == s.extras.values,
                    "extras differ");
  for (const FloatArena* arena : {&s.params, &s.adam_m, &s.adam_v}) {
    GASLOC_FUZZ_CHECK(arena->size() == layout->total_floats(), "arena size");
    CheckFinite(arena->data(), arena->size(), "arena");
  }
  for (const auto& [name, values] : s.extras.buffers)
    CheckFinite(values.data(), values.size(), "buffer " + name);

  CheckpointView view;
  view.config = s.config;
  view.params = &s.params;
  view.adam_m = &s.adam_m;
  view.adam_v = &s.adam_v;
  view.adam_step = s.adam_step;
  view.step = s.step;
  view.data_cursor = s.data_cursor;
  view.extras = &s.extras;
  const std::string again = path + ".again";
  const absl::Status written = WriteCheckpoint(again, view);
  GASLOC_FUZZ_CHECK(written.ok(), written.ToString());
  auto reread = ReadCheckpoint(again, layout);
  GASLOC_FUZZ_CHECK(reread.ok(), reread.status().ToString());
  GASLOC_FUZZ_CHECK(SameState(s, **reread), "written back, read differently");
}

}  // namespace

// Checkpoints WriteCheckpoint writes (with and without extras), each with
// every fix-up on, so mutations of any section are read past the CRC.
void WriteSeeds(SeedWriter& seeds) {
  const auto layout = CheckpointLayout();
  FloatArena params(layout), m(layout), v(layout);
  for (size_t i = 0; i < params.size(); ++i) {
    params.data()[i] = 0.25f * i - 1.0f;
    m.data()[i] = 0.01f * i;
    v.data()[i] = 0.001f * i;
  }
  CheckpointExtras extras;
  extras.buffers["outer.momentum"] = {0.5f, -0.5f, 1.5f};
  extras.buffers["empty"] = {};
  extras.values["round"] = "17";
  extras.values["job"] = "4";
  const std::string path = ScratchDir() + "/seed.ckpt";
  for (bool with_extras : {false, true}) {
    CheckpointView view;
    view.config = CheckpointConfig();
    view.params = &params;
    view.adam_m = &m;
    view.adam_v = &v;
    view.adam_step = 12;
    view.step = 12;
    view.data_cursor = 96;
    view.extras = with_extras ? &extras : nullptr;
    const absl::Status written = WriteCheckpoint(path, view);
    GASLOC_FUZZ_CHECK(written.ok(), written.ToString());
    const std::string file = ReadFile(path);
    seeds.Add(with_extras ? "with_extras" : "plain",
              std::string(1, static_cast<char>(kFixLength | kFixCrc)) + file);
    if (with_extras)
      seeds.Add("with_extras_unfixed", std::string(1, '\0') + file);
  }
  std::filesystem::remove_all(ScratchDir());
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  gasloc::fuzz::ApplyFixUps(data[0], file);
  const std::string path = gasloc::fuzz::ScratchDir() + "/input.ckpt";
  gasloc::fuzz::WriteFile(path, file);
  gasloc::fuzz::CheckFile(path);
  return 0;
}
