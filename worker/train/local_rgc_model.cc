#include "worker/train/local_rgc_model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "dnnl.hpp"

namespace gasloc {

// One stage: its model (blocks [first, end) only), its readout gradient
// and the mailbox(es) it hands its output to the next stage through.
struct LocalRgcModel::Stage {
  std::unique_ptr<TransformerModel> model;
  std::vector<float> readout;                // ln_f w, ln_f b, head w
  std::vector<std::vector<float>> mailbox;   // slots, (max_batch, T, d) each
  bool worked = false;
  absl::Status status;
};

absl::StatusOr<std::unique_ptr<LocalRgcModel>> LocalRgcModel::Create(
    const ModelConfig& config, const ModelOptions& options,
    const LocalRgcOptions& rgc) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  ASSIGN_OR_RETURN(std::vector<StageRange> ranges,
                   PartitionStages(config, rgc.stages));
  if (rgc.threads_per_stage < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_rgc.threads_per_stage must be >= 0, got ",
        rgc.threads_per_stage));
  }
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelOptions.max_batch must be >= 1, got ", options.max_batch));
  }
  const int total = options.threads > 0 ? options.threads : omp_get_num_procs();
  const int per_stage = rgc.threads_per_stage > 0
                            ? rgc.threads_per_stage
                            : std::max(1, total / rgc.stages);
  std::unique_ptr<LocalRgcModel> model(new LocalRgcModel(
      config, MakeModelLayout(config), options, rgc, std::move(ranges),
      per_stage));
  const size_t slot = static_cast<size_t>(options.max_batch) * config.context *
                      config.d_model;
  const size_t readout = (2 + static_cast<size_t>(kVocabSize)) * config.d_model;
  const int K = rgc.stages;
  for (int k = 0; k < K; ++k) {
    ModelOptions stage_options = options;
    stage_options.threads = per_stage;
    stage_options.first_block = model->ranges_[k].first_block;
    stage_options.num_blocks = model->ranges_[k].num_blocks;
    auto stage = std::make_unique<Stage>();
    ASSIGN_OR_RETURN(stage->model,
                     TransformerModel::Create(config, stage_options));
    stage->readout.assign(readout, 0.0f);
    if (k + 1 < K) {
      stage->mailbox.assign(rgc.asynchronous ? 2 : 1,
                            std::vector<float>(slot, 0.0f));
    }
    model->stages_.push_back(std::move(stage));
  }
  if (rgc.asynchronous) {
    model->token_ring_.assign(
        K, std::vector<uint8_t>(static_cast<size_t>(options.max_batch) *
                                (config.context + 1)));
  }
  model->threads_ = std::make_unique<StageThreads>(K);
  return model;
}

LocalRgcModel::LocalRgcModel(const ModelConfig& config,
                             std::shared_ptr<const ArenaLayout> layout,
                             const ModelOptions& options,
                             const LocalRgcOptions& rgc,
                             std::vector<StageRange> ranges,
                             int threads_per_stage)
    : Model(config, std::move(layout)),
      options_(options),
      rgc_(rgc),
      ranges_(std::move(ranges)),
      threads_per_stage_(threads_per_stage),
      index_(TensorIndex(config)),
      stage_losses_(rgc.stages, std::numeric_limits<double>::quiet_NaN()),
      target_override_(rgc.stages),
      handoff_step_(rgc.stages, 0) {}

LocalRgcModel::~LocalRgcModel() = default;

// ------------------------------------------------------------ one stage

void LocalRgcModel::StageLocalPass(int k, const uint8_t* tokens, int stride,
                                   float* grads, float* handoff) {
  Stage& s = *stages_[k];
  TransformerModel& m = *s.model;
  const StageRange& r = ranges_[k];
  for (int l = r.first_block; l < r.end_block(); ++l) {
    m.BlockForward(l, m.x(l), m.x(l + 1));
  }
  float* h = m.x(r.end_block());
  if (handoff != nullptr) {
    std::memcpy(handoff, h,
                sizeof(float) * batch_ * length_ * config_.d_model);
    if (!rgc_.asynchronous) SignalHandoff(k, true);
  }
  // Local loss through the shared decoder; its gradient stays private.
  const size_t d = config_.d_model;
  const uint8_t* targets = target_override_[k].empty()
                              ? tokens + 1
                              : target_override_[k].data() + 1;
  stage_losses_[k] = m.DecoderForward(h, targets, stride, true);
  m.DecoderBackward(h, m.dx(0),
                    TransformerModel::DecoderGrads{
                        .lnf_w = s.readout.data(),
                        .lnf_b = s.readout.data() + d,
                        .head_w = s.readout.data() + 2 * d});
  for (int l = r.end_block() - 1; l >= r.first_block; --l) {
    m.BlockBackward(l, m.dx(0), m.dx(0), grads);
  }
  if (k == 0) m.EmbedBackward(tokens, stride, m.dx(0), grads);
  s.worked = true;
}

absl::Status LocalRgcModel::RunStageSync(int k, const uint8_t* tokens,
                                         int stride, float* grads) {
  TransformerModel& m = *stages_[k]->model;
  m.set_threads(threads_per_stage_);
  RETURN_IF_ERROR(m.Prepare(*params_, batch_, length_));
  const int first = ranges_[k].first_block;
  if (k == 0) {
    m.EmbedForward(tokens, stride, m.x(0));
  } else {
    if (!WaitHandoff(k - 1)) {
      return absl::AbortedError(
          absl::StrCat("stage ", k + 1, ": an earlier stage failed"));
    }
    std::memcpy(m.x(first), stages_[k - 1]->mailbox[0].data(),
                sizeof(float) * batch_ * length_ * config_.d_model);
  }
  float* handoff =
      k + 1 < stages() ? stages_[k]->mailbox[0].data() : nullptr;
  StageLocalPass(k, tokens, stride, grads, handoff);
  return absl::OkStatus();
}

absl::Status LocalRgcModel::RunStageTick(int k, int stride, float* grads) {
  const int K = stages();
  if (tick_ < static_cast<uint64_t>(k)) {  // pipeline still filling
    ZeroStageGrads(k, grads);
    return absl::OkStatus();
  }
  TransformerModel& m = *stages_[k]->model;
  m.set_threads(threads_per_stage_);
  RETURN_IF_ERROR(m.Prepare(*params_, batch_, length_));
  const uint8_t* tokens = token_ring_[(tick_ - k) % K].data();
  const int first = ranges_[k].first_block;
  if (k == 0) {
    m.EmbedForward(tokens, stride, m.x(0));
  } else {
    // h_{k-1} of this batch: written by stage k-1 in the previous tick.
    std::memcpy(m.x(first), stages_[k - 1]->mailbox[(tick_ - 1) % 2].data(),
                sizeof(float) * batch_ * length_ * config_.d_model);
  }
  float* handoff =
      k + 1 < K ? stages_[k]->mailbox[tick_ % 2].data() : nullptr;
  StageLocalPass(k, tokens, stride, grads, handoff);
  return absl::OkStatus();
}

void LocalRgcModel::ZeroStageGrads(int k, float* grads) const {
  const auto& entries = layout_->entries();
  const StageRange& r = ranges_[k];
  const size_t begin = entries[index_.blocks[r.first_block].ln1_w].offset;
  const auto& last = entries[index_.blocks[r.end_block() - 1].fc2_b];
  std::fill(grads + begin, grads + last.offset + last.size, 0.0f);
}

void LocalRgcModel::AverageReadouts(FloatArena* grads) const {
  const size_t d = config_.d_model;
  float* out[3] = {grads->view(index_.lnf_w).data(),
                   grads->view(index_.lnf_b).data(),
                   grads->view(index_.head_w).data()};
  const size_t sizes[3] = {d, d, static_cast<size_t>(kVocabSize) * d};
  int working = 0;
  for (const auto& s : stages_) working += s->worked ? 1 : 0;
  const float scale = 1.0f / static_cast<float>(std::max(working, 1));
  size_t base = 0;
  for (int part = 0; part < 3; ++part) {
    for (size_t i = 0; i < sizes[part]; ++i) {
      float sum = 0.0f;
      bool first = true;
      for (const auto& s : stages_) {
        if (!s->worked) continue;
        sum = first ? s->readout[base + i] : sum + s->readout[base + i];
        first = false;
      }
      out[part][i] = sum * scale;
    }
    base += sizes[part];
  }
}

void LocalRgcModel::SignalHandoff(int boundary, bool ok) {
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    if (ok) {
      handoff_step_[boundary] = step_;
    } else {
      handoff_failed_ = true;
    }
  }
  handoff_cv_.notify_all();
}

bool LocalRgcModel::WaitHandoff(int boundary) {
  std::unique_lock<std::mutex> lock(handoff_mu_);
  handoff_cv_.wait(lock, [&] {
    return handoff_failed_ || handoff_step_[boundary] == step_;
  });
  return handoff_step_[boundary] == step_;
}

// ------------------------------------------------------------ Model API

absl::StatusOr<float> LocalRgcModel::ForwardBackward(
    const FloatArena& params, const uint8_t* tokens, int batch, int length,
    FloatArena* grads) {
  if (tokens == nullptr || grads == nullptr) {
    return absl::InvalidArgumentError("ForwardBackward: null tokens or grads");
  }
  for (const FloatArena* arena : {&params, static_cast<const FloatArena*>(grads)}) {
    if (arena->layout().fingerprint() != layout_->fingerprint()) {
      return absl::InvalidArgumentError(
          "ForwardBackward: an arena has a different layout than the model");
    }
  }
  if (batch < 1 || batch > options_.max_batch || length < 1 ||
      length > config_.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardBackward: batch must be in [1, ", options_.max_batch,
        "] and length in [1, ", config_.context, "], got ", batch, ", ",
        length));
  }
  if (rgc_.asynchronous && (batch != batch_ || length != length_) &&
      tick_ > 0) {
    tick_ = 0;  // another shape: the batches in flight cannot continue
  }
  params_ = &params;
  batch_ = batch;
  length_ = length;
  const int stride = length + 1;
  const int K = stages();
  for (int k = 0; k < K; ++k) {
    stages_[k]->worked = false;
    stages_[k]->status = absl::OkStatus();
    stage_losses_[k] = std::numeric_limits<double>::quiet_NaN();
  }
  if (rgc_.asynchronous) {
    std::copy_n(tokens, static_cast<size_t>(batch) * stride,
                token_ring_[tick_ % K].data());
  } else {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    ++step_;
    handoff_failed_ = false;
  }
  float* g = grads->data();
  threads_->Run([&](int k) {
    absl::Status status;
    try {
      status = rgc_.asynchronous ? RunStageTick(k, stride, g)
                                 : RunStageSync(k, tokens, stride, g);
    } catch (const dnnl::error& e) {
      status = kernels::OneDnnStatus(
          absl::StrCat("stage ", k + 1, " of a local-training step"),
          Cdt(), e);
    }
    if (!status.ok() && !rgc_.asynchronous) SignalHandoff(k, false);
    stages_[k]->status = status;
  });
  for (const auto& s : stages_) RETURN_IF_ERROR(s->status);
  if (rgc_.asynchronous) ++tick_;
  AverageReadouts(grads);
  for (int k = K - 1; k >= 0; --k) {
    if (stages_[k]->worked) return static_cast<float>(stage_losses_[k]);
  }
  return absl::InternalError("ForwardBackward: no stage worked");
}

absl::StatusOr<float> LocalRgcModel::Forward(const FloatArena& params,
                                             const uint8_t* tokens, int batch,
                                             int length) {
  if (tokens == nullptr) return absl::InvalidArgumentError("Forward: null tokens");
  const int stride = length + 1;
  try {
    float* prev = nullptr;
    for (int k = 0; k < stages(); ++k) {
      TransformerModel& m = *stages_[k]->model;
      m.set_threads(options_.threads);
      RETURN_IF_ERROR(m.Prepare(params, batch, length));
      const StageRange& r = ranges_[k];
      if (k == 0) {
        m.EmbedForward(tokens, stride, m.x(0));
      } else {
        std::memcpy(m.x(r.first_block), prev,
                    sizeof(float) * batch * length * config_.d_model);
      }
      for (int l = r.first_block; l < r.end_block(); ++l) {
        m.BlockForward(l, m.x(l), m.x(l + 1));
      }
      prev = m.x(r.end_block());
    }
    return static_cast<float>(stages_.back()->model->DecoderForward(
        prev, tokens + 1, stride, false));
  } catch (const dnnl::error& e) {
    return kernels::OneDnnStatus("local-training evaluation", Cdt(), e);
  }
}

absl::Status LocalRgcModel::NextByteLogits(const FloatArena&, const uint8_t*,
                                           int, float*) {
  return absl::UnimplementedError(
      "NextByteLogits: a local-RGC model only trains and evaluates; generate "
      "from a checkpoint with a global model (same arena layout)");
}

double LocalRgcModel::TrainingFlops(int batch, int length) const {
  // The useful work of one step, as for global backprop (the K - 1 extra
  // decoder passes are overhead, not progress).
  return stages_.front()->model->TrainingFlops(batch, length);
}

std::vector<float> LocalRgcModel::ReadoutGradient(int k) const {
  if (!stages_[k]->worked) return {};
  return stages_[k]->readout;
}

void LocalRgcModel::OverrideStageTargets(int k, std::vector<uint8_t> windows) {
  target_override_[k] = std::move(windows);
}

LocalRgcMemory LocalRgcModel::Memory() const {
  LocalRgcMemory m;
  for (const auto& s : stages_) {
    m.stage_workspaces += s->model->workspace_bytes();
    m.stage_weights += s->model->plan_weight_bytes();
    m.readout += sizeof(float) * s->readout.size();
    for (const auto& slot : s->mailbox) m.handoff += sizeof(float) * slot.size();
  }
  for (const auto& t : token_ring_) m.tokens += t.size();
  return m;
}

}  // namespace gasloc
