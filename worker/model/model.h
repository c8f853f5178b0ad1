// The byte-level decoder-only transformer (docs/model.md): forward and
// backward on oneDNN, fp32 or bf16 compute with fp32 master weights.
//
// The model owns no parameters: it computes with a parameter arena passed
// in, so the inner optimizer, the outer algorithms, checkpoints and the
// exchange all share one flat buffer. It owns its activation workspace and
// its oneDNN primitives (created once per shape, reused).
//
// Thread safety: a Model is used by one thread at a time (it runs its own
// OpenMP / oneDNN threads inside each call). Different Models are
// independent.
#ifndef GASLOC_WORKER_MODEL_MODEL_H_
#define GASLOC_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/arena.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc {

inline constexpr int kVocabSize = 256;

struct ModelConfig {
  int layers = 4;
  int d_model = 256;
  int heads = 4;
  int context = 256;  // T: longest sequence, position-table rows
};

ModelConfig ModelConfigFromSpec(const v1::ModelSpec& spec);

// The tensor table in arena order (names and shapes in docs/model.md).
std::vector<TensorSpec> ModelTensors(const ModelConfig& config);
std::shared_ptr<const ArenaLayout> MakeModelLayout(const ModelConfig& config);

// Positions of the tensors in the table above (entry indices into
// ArenaLayout::entries(), usable with FloatArena::view()).
struct BlockTensorIndex {
  int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  int ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
};
struct ModelTensorIndex {
  int tok_emb = 0, pos_emb = 1;
  std::vector<BlockTensorIndex> blocks;
  int lnf_w = 0, lnf_b = 0, head_w = 0;
};
ModelTensorIndex TensorIndex(const ModelConfig& config);

// INVALID_ARGUMENT naming the field when a config cannot build a model.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Initialises parameters as docs/model.md says (N(0, 0.02) weights, residual
// projections N(0, 0.02/sqrt(2L)), zero biases, unit LayerNorm gains),
// deterministically from `seed`.
void InitParameters(const ModelConfig& config, uint64_t seed,
                    FloatArena* params);

struct ModelOptions {
  v1::Precision precision = v1::PRECISION_FP32;
  // Compute threads for oneDNN / OpenMP; 0 = all cores.
  int threads = 0;
  // Largest batch any call will pass (sizes the workspace).
  int max_batch = 16;
  // Blocks whose saved activations and blocked weights the model keeps:
  // [first_block, first_block + num_blocks); num_blocks 0 = through the last
  // block. A model holding fewer than all blocks serves only the pass by
  // part (one stage of local training, TransformerModel); its whole-model
  // calls fail with FAILED_PRECONDITION.
  int first_block = 0;
  int num_blocks = 0;
};

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config, const ModelOptions& options);
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }
  const std::shared_ptr<const ArenaLayout>& layout() const { return layout_; }

  // tokens: (batch, length + 1) bytes, row-major; inputs are
  // tokens[:, :length], targets tokens[:, 1:]. length <= context.
  // Returns the mean cross-entropy in nats per byte and writes (overwrites)
  // d loss / d params into `grads` (same layout as params).
  virtual absl::StatusOr<float> ForwardBackward(const FloatArena& params,
                                                const uint8_t* tokens,
                                                int batch, int length,
                                                FloatArena* grads) = 0;
  // Loss only (evaluation).
  virtual absl::StatusOr<float> Forward(const FloatArena& params,
                                        const uint8_t* tokens, int batch,
                                        int length) = 0;
  // Logits (256 floats) of the byte following `prefix[0, length)`
  // (length <= context), for generation.
  virtual absl::Status NextByteLogits(const FloatArena& params,
                                      const uint8_t* prefix, int length,
                                      float* logits) = 0;
  // FLOPs of one ForwardBackward at (batch, length), for throughput reports.
  virtual double TrainingFlops(int batch, int length) const = 0;

 protected:
  Model(const ModelConfig& config, std::shared_ptr<const ArenaLayout> layout)
      : config_(config), layout_(std::move(layout)) {}
  ModelConfig config_;
  std::shared_ptr<const ArenaLayout> layout_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_MODEL_MODEL_H_
