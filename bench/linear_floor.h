// The time floor of a training step's linear layers: every matmul of the
// model's linear layers (forward, backward-data, backward-weights of qkv,
// proj, fc, fc2 per block, and the head), built with the model's own
// settings (TransformerModel::LinearShapes) and timed alone, back to back on
// warm buffers, summed over the layers. No step can be faster than this
// with oneDNN's matmuls (attention, LayerNorm, GELU, softmax, the optimizer
// and the bias-gradient sums come on top), which makes it the yardstick for
// speed targets relative to another implementation that uses the same
// oneDNN kernels (PyTorch's bf16 autocast; docs/benchmarks.md).
//
// Thread safety: call from one thread; runs OpenMP threads inside.
#ifndef GASLOC_BENCH_LINEAR_FLOOR_H_
#define GASLOC_BENCH_LINEAR_FLOOR_H_

#include <string>
#include <vector>

#include "worker/model/model.h"

namespace gasloc::bench {

struct LinearFloor {
  struct Part {
    std::string name;  // e.g. "fc2 bwd_weights"
    double ms = 0;     // one call, median
    double gflops = 0;
  };
  std::vector<Part> parts;  // one entry per matmul kind and pass
  double step_ms = 0;       // the sum over a whole step (all layers)
};

// M = batch * ctx rows; bf16 or fp32 compute; `threads` OpenMP threads.
LinearFloor MeasureLinearFloor(const ModelConfig& config, int batch, bool bf16,
                               int threads);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_LINEAR_FLOOR_H_
