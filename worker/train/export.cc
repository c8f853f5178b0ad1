#include "worker/train/export.h"

#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "worker/model/kernels.h"
#include "worker/train/checkpoint.h"

namespace gasloc {
namespace {

// Our arena names -> GPT-2's, per block (the order of docs/model.md).
struct BlockName {
  const char* ours;
  const char* gpt2;
  bool transposed;
};
constexpr BlockName kBlockNames[] = {
    {"ln1.weight", "ln_1.weight", false},
    {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},
    {"ln2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},
    {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.fc2.weight", "mlp.c_proj.weight", true},
    {"mlp.fc2.bias", "mlp.c_proj.bias", false},
};

std::vector<int64_t> ExportedShape(const TensorSpec& spec, bool transposed) {
  if (!transposed) return spec.shape;
  return {spec.shape[1], spec.shape[0]};
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string JsonString(absl::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

std::string JsonNumber(double x) { return absl::StrFormat("%.10g", x); }

absl::Status IoError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Writes `bytes` to PATH.tmp, fsyncs it and renames it over PATH, so a
// reader sees the old file or the whole new one.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  std::FILE* file = std::fopen(tmp.c_str(), "wbe");
  if (file == nullptr) return IoError("cannot create", tmp);
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size() &&
            std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  ok = std::fclose(file) == 0 && ok;
  ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    const absl::Status status = IoError("cannot write", path);
    std::remove(tmp.c_str());
    return status;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ExportedTensor> ExportedTensors(const ModelConfig& config) {
  const ModelTensorIndex index = TensorIndex(config);
  std::vector<ExportedTensor> out;
  out.push_back({"transformer.wte.weight", static_cast<size_t>(index.tok_emb),
                 false});
  out.push_back({"transformer.wpe.weight", static_cast<size_t>(index.pos_emb),
                 false});
  for (int l = 0; l < config.layers; ++l) {
    const BlockTensorIndex& b = index.blocks[l];
    const int entries[] = {b.ln1_w, b.ln1_b, b.qkv_w, b.qkv_b,
                           b.proj_w, b.proj_b, b.ln2_w, b.ln2_b,
                           b.fc_w, b.fc_b, b.fc2_w, b.fc2_b};
    for (size_t i = 0; i < std::size(kBlockNames); ++i) {
      out.push_back({absl::StrCat("transformer.h.", l, ".",
                                  kBlockNames[i].gpt2),
                     static_cast<size_t>(entries[i]),
                     kBlockNames[i].transposed});
    }
  }
  out.push_back({"transformer.ln_f.weight", static_cast<size_t>(index.lnf_w),
                 false});
  out.push_back({"transformer.ln_f.bias", static_cast<size_t>(index.lnf_b),
                 false});
  out.push_back({"lm_head.weight", static_cast<size_t>(index.head_w), false});
  return out;
}

std::vector<SafetensorsTensor> ExportTensors(const ModelConfig& config,
                                             const FloatArena& params,
                                             ExportDtype dtype) {
  std::vector<SafetensorsTensor> out;
  const auto& entries = params.layout().entries();
  for (const ExportedTensor& t : ExportedTensors(config)) {
    const TensorSpec& spec = entries[t.entry].spec;
    const std::span<const float> src = params.view(t.entry);
    std::vector<float> values(src.begin(), src.end());
    if (t.transposed) {
      const int64_t rows = spec.shape[0], cols = spec.shape[1];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) values[c * rows + r] = src[r * cols + c];
      }
    }
    SafetensorsTensor tensor;
    tensor.name = t.name;
    tensor.shape = ExportedShape(spec, t.transposed);
    if (dtype == ExportDtype::kBF16) {
      tensor.dtype = SafetensorsDtype::kBF16;
      tensor.data.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t b = kernels::FloatToBf16(values[i]);
        tensor.data[2 * i] = static_cast<char>(b & 0xff);
        tensor.data[2 * i + 1] = static_cast<char>(b >> 8);
      }
    } else {
      tensor.dtype = SafetensorsDtype::kF32;
      tensor.data.resize(values.size() * 4);
      std::memcpy(tensor.data.data(), values.data(), tensor.data.size());
    }
    out.push_back(std::move(tensor));
  }
  return out;
}

std::string ExportConfigJson(const ModelConfig& config,
                             const ExportOptions& options) {
  const int d = config.d_model;
  std::string out = "{\n";
  const auto field = [&out](absl::string_view name, absl::string_view value) {
    absl::StrAppend(&out, "  ", JsonString(name), ": ", value, ",\n");
  };
  field("architectures", "[\"GPT2LMHeadModel\"]");
  field("model_type", "\"gpt2\"");
  field("vocab_size", absl::StrCat(kVocabSize));
  field("n_positions", absl::StrCat(config.context));
  field("n_ctx", absl::StrCat(config.context));
  field("n_embd", absl::StrCat(d));
  field("n_layer", absl::StrCat(config.layers));
  field("n_head", absl::StrCat(config.heads));
  field("n_inner", absl::StrCat(4 * d));
  field("activation_function", "\"gelu\"");
  field("layer_norm_epsilon", "1e-05");
  field("initializer_range", "0.02");
  field("resid_pdrop", "0.0");
  field("embd_pdrop", "0.0");
  field("attn_pdrop", "0.0");
  field("scale_attn_weights", "true");
  field("tie_word_embeddings", "false");
  field("torch_dtype", options.dtype == ExportDtype::kBF16 ? "\"bfloat16\""
                                                           : "\"float32\"");
  out += "  \"gasloc\": {\n    \"format\": 1";
  if (options.spec.has_value()) {
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    std::string spec_json;
    if (google::protobuf::util::MessageToJsonString(*options.spec, &spec_json,
                                                    print)
            .ok()) {
      absl::StrAppend(&out, ",\n    \"spec\": ", spec_json);
    }
  }
  std::vector<std::string> metrics;
  for (const auto& [name, value] : options.metrics) {
    if (std::isfinite(value))
      metrics.push_back(absl::StrCat(JsonString(name), ": ", JsonNumber(value)));
  }
  absl::StrAppend(&out, ",\n    \"metrics\": {",
                  absl::StrJoin(metrics, ", "), "}");
  for (const auto& [name, value] : options.values) {
    absl::StrAppend(&out, ",\n    ", JsonString(name), ": ", JsonString(value));
  }
  out += "\n  }\n}\n";
  return out;
}

absl::Status ExportModel(const std::string& dir, const ModelConfig& config,
                         const FloatArena& params,
                         const ExportOptions& options) {
  if (params.layout().fingerprint() != MakeModelLayout(config)->fingerprint())
    return absl::InvalidArgumentError(
        "export: the parameters' layout is not the model config's");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::UnavailableError(
        absl::StrCat("cannot create ", dir, ": ", error.message()));
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"gasloc.model",
       absl::StrFormat("layers=%d d_model=%d heads=%d context=%d",
                       config.layers, config.d_model, config.heads,
                       config.context)}};
  for (const auto& [name, value] : options.metrics) {
    if (std::isfinite(value))
      metadata[absl::StrCat("gasloc.metric.", name)] = JsonNumber(value);
  }
  for (const auto& [name, value] : options.values)
    metadata[absl::StrCat("gasloc.", name)] = value;
  const std::string weights =
      EncodeSafetensors(ExportTensors(config, params, options.dtype), metadata);
  RETURN_IF_ERROR(WriteFileAtomically(
      (std::filesystem::path(dir) / kExportWeightsFile).string(), weights));
  return WriteFileAtomically(
      (std::filesystem::path(dir) / kExportConfigFile).string(),
      ExportConfigJson(config, options));
}

absl::Status ExportCheckpoints(const std::vector<std::string>& checkpoints,
                               const std::string& dir, ExportOptions options) {
  if (checkpoints.empty())
    return absl::InvalidArgumentError("export: no checkpoint given");
  ASSIGN_OR_RETURN(ModelConfig config, ReadCheckpointConfig(checkpoints[0]));
  const auto layout = MakeModelLayout(config);
  FloatArena sum(layout);
  uint64_t step = 0;
  for (const std::string& path : checkpoints) {
    ASSIGN_OR_RETURN(auto state, ReadCheckpoint(path, layout));
    step = std::max(step, state->step);
    for (size_t i = 0; i < sum.size(); ++i) sum.data()[i] += state->params.data()[i];
    for (const auto& [key, value] : state->extras.values)
      options.values.emplace(key, value);
  }
  const float scale = 1.0f / static_cast<float>(checkpoints.size());
  for (size_t i = 0; i < sum.size(); ++i) sum.data()[i] *= scale;
  options.metrics.emplace("step", static_cast<double>(step));
  if (checkpoints.size() > 1)
    options.metrics.emplace("members", static_cast<double>(checkpoints.size()));
  return ExportModel(dir, config, sum, options);
}

absl::Status ImportModelFromBytes(absl::string_view bytes,
                                  absl::string_view source,
                                  const ModelConfig& config,
                                  FloatArena* params) {
  auto file = ParseSafetensors(bytes);
  if (!file.ok()) return Annotate(file.status(), source);
  FloatArena scratch(MakeModelLayout(config));
  if (params->layout().fingerprint() != scratch.layout().fingerprint())
    return absl::InvalidArgumentError(
        "import: the parameters' layout is not the model config's");
  const std::vector<ExportedTensor> expected = ExportedTensors(config);
  const auto& entries = scratch.layout().entries();
  for (const ExportedTensor& t : expected) {
    const SafetensorsView* view = file->Find(t.name);
    if (view == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": no tensor \"", t.name, "\", which the model (layers ",
          config.layers, ", d_model ", config.d_model, ") needs"));
    const TensorSpec& spec = entries[t.entry].spec;
    const std::vector<int64_t> shape = ExportedShape(spec, t.transposed);
    if (view->shape != shape)
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": tensor \"", t.name, "\" has shape ",
          ShapeText(view->shape), ", the model needs ", ShapeText(shape)));
    if (view->dtype != SafetensorsDtype::kF32 &&
        view->dtype != SafetensorsDtype::kBF16)
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": tensor \"", t.name, "\" is ",
          SafetensorsDtypeName(view->dtype), "; import reads F32 or BF16"));
    const size_t n = entries[t.entry].size;
    std::vector<float> values(n);
    const auto* raw = reinterpret_cast<const unsigned char*>(view->data.data());
    for (size_t i = 0; i < n; ++i) {
      if (view->dtype == SafetensorsDtype::kBF16) {
        values[i] = kernels::Bf16ToFloat(
            static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8)));
      } else {
        std::memcpy(&values[i], raw + 4 * i, 4);
      }
      if (!std::isfinite(values[i]))
        return absl::DataLossError(absl::StrCat(
            source, ": tensor \"", t.name, "\" holds a non-finite value (",
            values[i], ") at element ", i));
    }
    std::span<float> dst = scratch.view(t.entry);
    if (t.transposed) {
      // The file holds (in, out) = (cols, rows) of our (rows, cols).
      const int64_t rows = spec.shape[0], cols = spec.shape[1];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = values[c * rows + r];
      }
    } else {
      std::copy(values.begin(), values.end(), dst.begin());
    }
  }
  if (file->tensors.size() != expected.size()) {
    for (const SafetensorsView& view : file->tensors) {
      bool known = false;
      for (const ExportedTensor& t : expected) known = known || t.name == view.name;
      if (!known)
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": tensor \"", view.name, "\" is not part of the model "
            "(layers ", config.layers, ", d_model ", config.d_model, ")"));
    }
  }
  params->CopyFrom(scratch);
  return absl::OkStatus();
}

absl::Status ImportModel(const std::string& dir, const ModelConfig& config,
                         FloatArena* params) {
  const std::string path =
      (std::filesystem::path(dir) / kExportWeightsFile).string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ",
                                            std::strerror(errno)));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad())
    return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return ImportModelFromBytes(bytes.str(), path, config, params);
}

}  // namespace gasloc
