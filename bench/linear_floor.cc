#include "bench/linear_floor.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "worker/model/kernels.h"
#include "worker/model/transformer.h"

namespace gasloc::bench {
namespace {

// Median milliseconds of `call` over 10 runs after 3 warm-up runs.
double MedianMs(const std::function<void()>& call) {
  std::vector<double> ms;
  for (int rep = 0; rep < 13; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    if (rep >= 3) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

LinearFloor MeasureLinearFloor(const ModelConfig& config, int batch, bool bf16,
                               int threads) {
  using kernels::dt;
  omp_set_num_threads(threads);
  kernels::DnnlEnv env;
  const int M = batch * config.context;
  const dt cdt = bf16 ? dt::bf16 : dt::f32;
  LinearFloor floor;
  for (const auto& shape : TransformerModel::LinearShapes(config, M, cdt)) {
    const kernels::Linear::Options& o = shape.options;
    kernels::Linear linear(&env, o);
    const size_t c = kernels::DtSize(cdt);
    // Inputs filled with small values (1/128 in f32 and bf16 alike).
    auto buffer = [](size_t bytes, bool fill) {
      std::vector<char> b(bytes, 0);
      if (fill) std::fill(b.begin(), b.end(), char{0x3c});
      return b;
    };
    std::vector<float> w(size_t{1} * o.N * o.K, 1.0f / 128), bias(o.N, 0.0f);
    std::vector<char> w_fwd(linear.fwd_weights_bytes()),
        w_bwd(linear.bwd_weights_bytes());
    linear.PrepareWeights(w.data(), w_fwd.data(), w_bwd.data());
    const size_t y_size = kernels::DtSize(o.y_type);
    const size_t dx_size = kernels::DtSize(o.dx_type);
    std::vector<char> x = buffer(size_t{1} * M * o.K * c, true);
    std::vector<char> y = buffer(size_t{1} * M * o.N * y_size, false);
    std::vector<char> dy = buffer(size_t{1} * M * o.N * c, true);
    std::vector<char> dx = buffer(size_t{1} * M * o.K * dx_size, false);
    std::vector<char> mul = buffer(size_t{1} * M * o.K * dx_size, true);
    std::vector<float> residual(o.residual ? size_t{1} * M * o.N : 0, 0.0f);
    std::vector<float> dw(size_t{1} * o.N * o.K);
    const double flops = 2.0 * M * o.K * o.N;
    const int per_step =
        std::string(shape.name) == "head" ? 1 : config.layers;
    const struct {
      const char* pass;
      std::function<void()> call;
    } passes[] = {
        {"fwd",
         [&] {
           linear.Forward(x.data(), w_fwd.data(),
                          o.bias ? bias.data() : nullptr,
                          o.residual ? residual.data() : nullptr, y.data());
         }},
        {"bwd_data",
         [&] {
           linear.BackwardData(dy.data(), w_bwd.data(), dx.data(),
                               o.bwd_data_mul ? mul.data() : nullptr);
         }},
        // The matmul alone: no bias-gradient column sum.
        {"bwd_weights",
         [&] {
           linear.BackwardWeights(x.data(), dy.data(), dw.data(), nullptr);
         }},
    };
    for (const auto& pass : passes) {
      const double ms = MedianMs(pass.call);
      floor.parts.push_back(
          {std::string(shape.name) + " " + pass.pass, ms, flops / ms / 1e6});
      floor.step_ms += per_step * ms;
    }
  }
  return floor;
}

}  // namespace gasloc::bench
