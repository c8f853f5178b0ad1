// Bad safetensors files given to import (worker/train/safetensors.h,
// export.h): each refused with its code and a message naming the problem
// (and the tensor), never a crash, the parameters untouched; every prefix
// of a good file refused; and a job spec's model.init_from: export ->
// import -> one evaluation reproduces the bpb.
#include "worker/train/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/train/tiny_trainer.h"
#include "worker/train/export.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

const ModelConfig kConfig{.layers = 1, .d_model = 8, .heads = 2, .context = 4};

std::vector<SafetensorsTensor> GoodTensors() {
  FloatArena params(MakeModelLayout(kConfig));
  for (size_t i = 0; i < params.size(); ++i)
    params.data()[i] = std::sin(static_cast<float>(i));
  return ExportTensors(kConfig, params, ExportDtype::kF32);
}

// A file of the given header text (padded) and data.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

SafetensorsTensor* Named(std::vector<SafetensorsTensor>& t,
                         const std::string& name) {
  for (SafetensorsTensor& x : t) {
    if (x.name == name) return &x;
  }
  ADD_FAILURE() << name;
  return &t[0];
}

struct BadFile {
  std::string what;
  std::string bytes;
  absl::StatusCode code;
  std::string message;  // a substring of the error
};

std::vector<BadFile> BadFiles() {
  const std::string good = EncodeSafetensors(GoodTensors(), {{"format", "pt"}});
  std::vector<BadFile> out;
  const auto data_loss = absl::StatusCode::kDataLoss;
  const auto invalid = absl::StatusCode::kInvalidArgument;
  out.push_back({"empty", "", data_loss, "shorter than the 8-byte header"});
  out.push_back({"truncated in the data", good.substr(0, good.size() - 1),
                 data_loss, "\"lm_head.weight\"'s data_offsets"});
  out.push_back({"truncated in the header", good.substr(0, 100), data_loss,
                 "runs past the end"});
  {
    std::string b = good;
    const uint64_t n = good.size();
    std::memcpy(b.data(), &n, 8);
    out.push_back({"header length past the end", b, data_loss,
                   "runs past the end of the"});
    const uint64_t huge = uint64_t{1} << 63;
    std::memcpy(b.data(), &huge, 8);
    out.push_back({"header length huge", b, data_loss, "over the limit"});
  }
  out.push_back({"bad JSON", RawFile("{\"a\": [1, ", ""), data_loss,
                 "not valid JSON"});
  out.push_back({"JSON not an object", RawFile("[1, 2]  ", ""), data_loss,
                 "not a JSON object"});
  out.push_back({"entry not an object", RawFile("{\"x\": 3}", ""), data_loss,
                 "tensor \"x\" is not a JSON object"});
  out.push_back({"no data_offsets",
                 RawFile("{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}", "1234"),
                 data_loss, "tensor \"x\" has no \"data_offsets\""});
  out.push_back({"unknown dtype",
                 RawFile("{\"x\": {\"dtype\": \"Q4\", \"shape\": [1], "
                         "\"data_offsets\": [0, 4]}}",
                         "1234"),
                 data_loss, "tensor \"x\" has an unknown dtype"});
  out.push_back({"negative dimension",
                 RawFile("{\"x\": {\"dtype\": \"F32\", \"shape\": [-1], "
                         "\"data_offsets\": [0, 4]}}",
                         "1234"),
                 data_loss, "not a non-negative integer"});
  out.push_back({"shape too large",
                 RawFile("{\"x\": {\"dtype\": \"F32\", \"shape\": [4294967296, "
                         "4294967296], \"data_offsets\": [0, 4]}}",
                         "1234"),
                 data_loss, "too large"});
  out.push_back({"span differs from the shape",
                 RawFile("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], "
                         "\"data_offsets\": [0, 4]}}",
                         "1234"),
                 data_loss, "span 4 bytes; F32 x 2 elements is 8"});
  out.push_back({"offsets reversed",
                 RawFile("{\"x\": {\"dtype\": \"F32\", \"shape\": [0], "
                         "\"data_offsets\": [4, 0]}}",
                         "1234"),
                 data_loss, "begin <= end"});
  out.push_back({"offsets out of range",
                 RawFile("{\"x\": {\"dtype\": \"F32\", \"shape\": [250], "
                         "\"data_offsets\": [0, 1000]}}",
                         "1234"),
                 data_loss, "run past the 4 data bytes"});
  out.push_back({"offsets overlapping",
                 RawFile("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], "
                         "\"data_offsets\": [0, 8]}, \"b\": {\"dtype\": "
                         "\"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                         "123456789012"),
                 data_loss, "tensor \"b\"'s data_offsets [4, 12) overlap "
                            "tensor \"a\"'s"});
  out.push_back({"a gap",
                 RawFile("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], "
                         "\"data_offsets\": [4, 8]}}",
                         "12345678"),
                 data_loss, "a gap of 4 bytes before tensor \"a\""});
  out.push_back({"data past the last tensor",
                 RawFile("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], "
                         "\"data_offsets\": [0, 4]}}",
                         "12345678"),
                 data_loss, "tensors cover 4 of the 8 data bytes"});
  out.push_back({"metadata not strings",
                 RawFile("{\"__metadata__\": {\"step\": 3}}", ""), data_loss,
                 "__metadata__ value \"step\" is not a string"});
  {
    auto t = GoodTensors();
    t.erase(t.end() - 1);
    out.push_back({"missing tensor", EncodeSafetensors(t, {}), invalid,
                   "no tensor \"lm_head.weight\""});
  }
  {
    auto t = GoodTensors();
    t.push_back({"transformer.h.1.ln_1.weight", SafetensorsDtype::kF32, {8},
                 std::string(32, '\0')});
    out.push_back({"extra tensor", EncodeSafetensors(t, {}), invalid,
                   "tensor \"transformer.h.1.ln_1.weight\" is not part of "
                   "the model"});
  }
  {
    auto t = GoodTensors();
    Named(t, "transformer.h.0.attn.c_attn.weight")->shape = {24, 8};
    out.push_back({"wrong shape (not transposed)", EncodeSafetensors(t, {}),
                   invalid,
                   "tensor \"transformer.h.0.attn.c_attn.weight\" has shape "
                   "[24, 8], the model needs [8, 24]"});
  }
  {
    auto t = GoodTensors();
    SafetensorsTensor* x = Named(t, "transformer.wpe.weight");
    x->dtype = SafetensorsDtype::kF16;
    x->data.resize(x->data.size() / 2);
    out.push_back({"wrong dtype", EncodeSafetensors(t, {}), invalid,
                   "tensor \"transformer.wpe.weight\" is F16; import reads "
                   "F32 or BF16"});
  }
  {
    auto t = GoodTensors();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(Named(t, "transformer.ln_f.bias")->data.data() + 12, &nan, 4);
    out.push_back({"NaN value", EncodeSafetensors(t, {}), data_loss,
                   "tensor \"transformer.ln_f.bias\" holds a non-finite "
                   "value (nan) at element 3"});
  }
  {
    auto t = ExportTensors(kConfig, FloatArena(MakeModelLayout(kConfig)),
                           ExportDtype::kBF16);
    SafetensorsTensor* x = Named(t, "lm_head.weight");
    x->data[0] = '\x80';  // bf16 +inf = 0x7f80
    x->data[1] = '\x7f';
    out.push_back({"bf16 infinity", EncodeSafetensors(t, {}), data_loss,
                   "tensor \"lm_head.weight\" holds a non-finite value (inf) "
                   "at element 0"});
  }
  return out;
}

TEST(SafetensorsImportTest, EveryBadFileIsRefusedNamingItsProblem) {
  FloatArena params(MakeModelLayout(kConfig));
  params.data()[0] = 42;
  for (const BadFile& bad : BadFiles()) {
    SCOPED_TRACE(bad.what);
    const absl::Status status =
        ImportModelFromBytes(bad.bytes, "m.safetensors", kConfig, &params);
    EXPECT_EQ(status.code(), bad.code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.message));
    EXPECT_THAT(std::string(status.message()),
                ::testing::StartsWith("m.safetensors: "));
    EXPECT_EQ(params.data()[0], 42);  // all or nothing
  }
}

TEST(SafetensorsImportTest, EveryPrefixOfAGoodFileIsRefused) {
  const std::string good = EncodeSafetensors(GoodTensors(), {{"format", "pt"}});
  FloatArena params(MakeModelLayout(kConfig));
  ASSERT_TRUE(ImportModelFromBytes(good, "m", kConfig, &params).ok());
  for (size_t n = 0; n < good.size(); n += n < 1200 ? 1 : 97) {
    EXPECT_EQ(ImportModelFromBytes(good.substr(0, n), "m", kConfig, &params)
                  .code(),
              absl::StatusCode::kDataLoss)
        << n;
  }
}

TEST(SafetensorsTest, EncodeParseRoundTripKeepsMetadataAndOrder) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"note", "a \"quoted\"\nline"}};
  const std::string bytes = EncodeSafetensors(GoodTensors(), metadata);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  auto file = ParseSafetensors(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, metadata);
  const auto expected = GoodTensors();
  ASSERT_EQ(file->tensors.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(file->tensors[i].name, expected[i].name);
    EXPECT_EQ(file->tensors[i].shape, expected[i].shape);
    EXPECT_EQ(file->tensors[i].data, expected[i].data);
  }
}

// model.init_from: a trainer started from an export evaluates to the
// exporting trainer's bpb (fp32: the same parameters, so the same value;
// bf16: within its rounding), and a spec of another shape is refused
// naming the field and the first mismatching tensor.
TEST(InitFromTest, ExportImportEvaluateReproducesTheBpb) {
  auto trainer = testing::MakeTrainerOf(testing::TinySpec());
  ASSERT_NE(trainer, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(trainer->Step().ok());
  auto bpb = trainer->EvaluateBpb();
  ASSERT_TRUE(bpb.ok());
  const std::string dir32 = testing::TempPath("init_from_fp32");
  const std::string dir16 = testing::TempPath("init_from_bf16");
  ExportOptions options;
  options.spec = trainer->spec();
  options.metrics["val_bpb"] = *bpb;
  ASSERT_TRUE(ExportModel(dir32, trainer->config(), trainer->params(), options).ok());
  options.dtype = ExportDtype::kBF16;
  ASSERT_TRUE(ExportModel(dir16, trainer->config(), trainer->params(), options).ok());

  v1::JobSpec spec = testing::TinySpec();
  spec.mutable_model()->set_init_from(dir32);
  auto imported = testing::MakeTrainerOf(spec);
  ASSERT_NE(imported, nullptr);
  auto imported_bpb = imported->EvaluateBpb();
  ASSERT_TRUE(imported_bpb.ok());
  EXPECT_EQ(*imported_bpb, *bpb);
  EXPECT_EQ(std::memcmp(imported->params().data(), trainer->params().data(),
                        trainer->params().size() * sizeof(float)),
            0);
  ASSERT_TRUE(imported->Step().ok());  // training continues from it

  spec.mutable_model()->set_init_from(dir16);
  auto imported16 = testing::MakeTrainerOf(spec);
  ASSERT_NE(imported16, nullptr);
  auto bpb16 = imported16->EvaluateBpb();
  ASSERT_TRUE(bpb16.ok());
  EXPECT_NEAR(*bpb16, *bpb, 0.01);

  spec.mutable_model()->set_init_from(dir32);
  spec.mutable_model()->set_context(16);
  TrainerOptions trainer_options;
  trainer_options.spec = spec;
  auto refused = Trainer::Create(trainer_options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::AllOf(::testing::StartsWith("model.init_from: "),
                               HasSubstr("tensor \"transformer.wpe.weight\" "
                                         "has shape [32, 32], the model "
                                         "needs [16, 32]")));
  spec.mutable_model()->set_init_from(dir32 + ".absent");
  trainer_options.spec = spec;
  EXPECT_EQ(Trainer::Create(trainer_options).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir32);
  std::filesystem::remove_all(dir16);
}

}  // namespace
}  // namespace gasloc
