// A model leaves in the ecosystem's format and comes back from it:
// a directory with `model.safetensors` (the weights under GPT-2's Hugging
// Face tensor names) and `config.json` (GPT-2's configuration fields plus a
// "gasloc" block with the job spec and metrics). docs/operations.md,
// "Taking a model out, bringing one in", lists the names and fields.
//
// Our model maps onto GPT-2 one to one (docs/model.md): the fused QKV
// projection's output is [q | k | v], each d wide with head j at columns
// j*hd .. (j+1)*hd, which is GPT-2's c_attn layout, so no reordering; but
// GPT-2's Conv1D stores a weight as (in, out) where ours is (out, in), so
// the four matrices of each block are transposed on the way out and back.
// Embeddings and lm_head keep their (rows, d) shape.
//
// ImportModel is all or nothing: it checks every tensor (present, F32 or
// BF16, the spec's shape, finite) into scratch and writes `params` only
// when all passed. A file that is not a well-formed safetensors file is
// DATA_LOSS (safetensors.h); a well-formed file of another model (a
// missing, extra or mis-shaped tensor, another dtype) is INVALID_ARGUMENT
// naming the first such tensor; a non-finite value is DATA_LOSS naming the
// tensor and element.
//
// Pure functions over their arguments and the files they name; thread-safe
// for distinct directories.
#ifndef GASLOC_WORKER_TRAIN_EXPORT_H_
#define GASLOC_WORKER_TRAIN_EXPORT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/arena.h"
#include "gasloc/v1/job.pb.h"
#include "worker/model/model.h"
#include "worker/train/safetensors.h"

namespace gasloc {

inline constexpr char kExportWeightsFile[] = "model.safetensors";
inline constexpr char kExportConfigFile[] = "config.json";

enum class ExportDtype { kF32, kBF16 };

struct ExportOptions {
  ExportDtype dtype = ExportDtype::kF32;
  // The job that trained the model: config.json's gasloc.spec (JSON, proto
  // field names). Absent: no spec written.
  std::optional<v1::JobSpec> spec;
  // Finite numbers known about the model (e.g. "step", "val_bpb"):
  // config.json's gasloc.metrics and metadata "gasloc.metric.<name>".
  std::map<std::string, double> metrics;
  // Strings (e.g. "source", "job_id"): gasloc.<name> in both places.
  std::map<std::string, std::string> values;
};

// One exported tensor: its Hugging Face name, the arena entry it comes
// from (index into the model layout's entries) and whether it is
// transposed on the way ((out, in) -> (in, out)).
struct ExportedTensor {
  std::string name;
  size_t entry = 0;
  bool transposed = false;
};
// In arena order.
std::vector<ExportedTensor> ExportedTensors(const ModelConfig& config);

// The tensors as written (names, shapes, bytes in `dtype`).
std::vector<SafetensorsTensor> ExportTensors(const ModelConfig& config,
                                             const FloatArena& params,
                                             ExportDtype dtype);

// config.json's text.
std::string ExportConfigJson(const ModelConfig& config,
                             const ExportOptions& options);

// Writes DIR/model.safetensors and DIR/config.json (DIR is created; each
// file is written to a temporary name, fsynced and renamed).
absl::Status ExportModel(const std::string& dir, const ModelConfig& config,
                         const FloatArena& params,
                         const ExportOptions& options);

// Exports the parameters of a checkpoint (docs/training.md's format):
// its step and the caller values it holds (gasloc-train's corpus path, a
// worker's job id) go in as metrics and values, beside `options`'. With
// several checkpoints (the members of a job whose algorithm leaves their
// models different, GASLoC), exports the mean of their parameters (the
// same model config required, FAILED_PRECONDITION naming the first that
// differs); step is the largest, the values are the first checkpoint's,
// and "members" counts them.
absl::Status ExportCheckpoints(const std::vector<std::string>& checkpoints,
                               const std::string& dir, ExportOptions options);

// Reads the weights of a safetensors file's bytes into `params` (the
// layout of `config`); `source` names the file in messages.
absl::Status ImportModelFromBytes(absl::string_view bytes,
                                  absl::string_view source,
                                  const ModelConfig& config,
                                  FloatArena* params);

// Reads DIR/model.safetensors (NOT_FOUND if absent) into `params`.
absl::Status ImportModel(const std::string& dir, const ModelConfig& config,
                         FloatArena* params);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_EXPORT_H_
