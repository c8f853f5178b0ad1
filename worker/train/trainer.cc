#include "worker/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "worker/train/export.h"
#include "worker/train/local_rgc_model.h"

namespace gasloc {

int ResolveThreads(int threads, const v1::JobSpec& spec) {
  if (threads > 0) return threads;
  if (spec.training().threads() > 0)
    return static_cast<int>(spec.training().threads());
  return std::max(1u, std::thread::hardware_concurrency());
}

LocalRgcOptions LocalRgcOptionsFromSpec(const v1::TrainingSpec& training) {
  LocalRgcOptions rgc;
  rgc.stages = static_cast<int>(training.local_rgc().stages());
  rgc.asynchronous = training.local_rgc().asynchronous();
  rgc.threads_per_stage =
      static_cast<int>(training.local_rgc().threads_per_stage());
  return rgc;
}

double TrainFractionFromSpec(float fraction) {
  return std::round(static_cast<double>(fraction) * 1e7) / 1e7;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const TrainerOptions& options) {
  const v1::JobSpec spec = ApplyJobSpecDefaults(options.spec);
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  ModelOptions model_options;
  model_options.precision = spec.training().precision();
  model_options.threads = ResolveThreads(options.threads, spec);
  model_options.max_batch = static_cast<int>(spec.training().batch());
  const ModelConfig config = ModelConfigFromSpec(spec.model());
  std::unique_ptr<Model> model;
  if (spec.training().mode() == v1::TRAIN_MODE_LOCAL_RGC) {
    ASSIGN_OR_RETURN(model, LocalRgcModel::Create(
                                config, model_options,
                                LocalRgcOptionsFromSpec(spec.training())));
  } else {
    ASSIGN_OR_RETURN(model, Model::Create(config, model_options));
  }
  auto trainer = CreateWithModel(options, std::move(model));
  if (!trainer.ok()) return trainer.status();
  if (spec.model().init_from().empty()) {
    InitParameters((*trainer)->config(), spec.training().seed(),
                   &(*trainer)->params_);
  } else {
    RETURN_IF_ERROR(Annotate(ImportModel(spec.model().init_from(),
                                         (*trainer)->config(),
                                         &(*trainer)->params_),
                             "model.init_from"));
  }
  return trainer;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateWithModel(
    const TrainerOptions& options, std::unique_ptr<Model> model) {
  const v1::JobSpec spec = ApplyJobSpecDefaults(options.spec);
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  const ModelConfig& config = model->config();
  if (config.layers != static_cast<int>(spec.model().layers()) ||
      config.d_model != static_cast<int>(spec.model().d_model()) ||
      config.heads != static_cast<int>(spec.model().heads()) ||
      config.context != static_cast<int>(spec.model().context())) {
    return absl::InvalidArgumentError(
        "Trainer: the model's config differs from the job's model spec");
  }
  const int window = config.context + 1;
  CorpusOptions corpus_options;
  corpus_options.path = spec.data().corpus_path();
  corpus_options.train_fraction =
      TrainFractionFromSpec(spec.data().train_fraction());
  corpus_options.min_part_bytes = static_cast<size_t>(window);
  ASSIGN_OR_RETURN(auto corpus, Corpus::Open(corpus_options));
  SamplerOptions sampler_options;
  sampler_options.seed = spec.training().seed();
  sampler_options.rank = options.rank;
  sampler_options.num_workers = options.num_workers;
  sampler_options.window = window;
  ASSIGN_OR_RETURN(WindowSampler sampler,
                   WindowSampler::Create(corpus->train(), sampler_options));
  ASSIGN_OR_RETURN(
      std::vector<size_t> eval_starts,
      EvalWindowStarts(corpus->validation().size(), window,
                       static_cast<int>(spec.data().eval_windows())));

  AdamWOptions adamw = AdamWOptionsFromSpec(spec.training().adamw());
  const int threads = ResolveThreads(options.threads, spec);
  adamw.threads = threads;
  if (adamw.decay_steps == 0) {
    adamw.decay_steps = options.total_steps > 0
                            ? options.total_steps
                            : spec.stop().max_rounds() *
                                  spec.outer().local_steps();
  }
  const Clock* clock =
      options.clock != nullptr ? options.clock : &RealClock::Get();
  return std::unique_ptr<Trainer>(new Trainer(
      spec, threads, clock, std::move(model), std::move(corpus),
      std::move(sampler), adamw, std::move(eval_starts)));
}

Trainer::Trainer(const v1::JobSpec& spec, int threads, const Clock* clock,
                 std::unique_ptr<Model> model, std::unique_ptr<Corpus> corpus,
                 WindowSampler sampler, const AdamWOptions& adamw,
                 std::vector<size_t> eval_starts)
    : spec_(spec),
      batch_(static_cast<int>(spec.training().batch())),
      threads_(threads),
      clock_(clock),
      model_(std::move(model)),
      corpus_(std::move(corpus)),
      sampler_(std::move(sampler)),
      params_(model_->layout()),
      grads_(model_->layout()),
      adamw_(model_->layout(), adamw),
      eval_starts_(std::move(eval_starts)),
      tokens_(static_cast<size_t>(batch_) * (model_->config().context + 1)) {}

absl::StatusOr<float> Trainer::ComputeGradients() {
  const int context = config().context;
  sampler_.NextBatch(batch_, tokens_.data());
  ASSIGN_OR_RETURN(float loss, model_->ForwardBackward(params_, tokens_.data(),
                                                       batch_, context,
                                                       &grads_));
  if (!std::isfinite(loss)) {
    grads_ready_ = false;
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step(), ": loss is not finite (", loss,
        "); parameters left unchanged"));
  }
  grads_ready_ = true;
  return loss;
}

absl::StatusOr<AdamWStepStats> Trainer::ApplyGradients() {
  if (!grads_ready_) {
    return absl::FailedPreconditionError(
        "ApplyGradients: no gradient computed since the last step");
  }
  ASSIGN_OR_RETURN(AdamWStepStats stats, adamw_.Step(&params_, grads_));
  grads_ready_ = false;
  return stats;
}

absl::StatusOr<StepStats> Trainer::Step() {
  const absl::Time start = clock_->Now();
  StepStats stats;
  ASSIGN_OR_RETURN(float loss, ComputeGradients());
  ASSIGN_OR_RETURN(AdamWStepStats applied, ApplyGradients());
  stats.loss = loss;
  stats.tokens = tokens_per_step();
  stats.lr = applied.lr;
  stats.grad_norm = applied.grad_norm;
  stats.seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  return stats;
}

absl::StatusOr<double> Trainer::EvaluateBpb() {
  const size_t window = static_cast<size_t>(config().context) + 1;
  const auto validation = corpus_->validation();
  std::vector<uint8_t> tokens(static_cast<size_t>(batch_) * window);
  double sum = 0;
  for (size_t first = 0; first < eval_starts_.size();
       first += static_cast<size_t>(batch_)) {
    const size_t count =
        std::min(eval_starts_.size() - first, static_cast<size_t>(batch_));
    for (size_t row = 0; row < count; ++row) {
      std::copy_n(validation.data() + eval_starts_[first + row], window,
                  tokens.data() + row * window);
    }
    ASSIGN_OR_RETURN(float loss,
                     model_->Forward(params_, tokens.data(),
                                     static_cast<int>(count), config().context));
    sum += static_cast<double>(loss) * static_cast<double>(count);
  }
  const double nats = sum / static_cast<double>(eval_starts_.size());
  if (!std::isfinite(nats)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation loss is not finite (", nats, ")"));
  }
  return nats / std::numbers::ln2;
}

absl::StatusOr<std::string> Trainer::Generate(absl::string_view prompt,
                                              const GenerateOptions& options) {
  return GenerateText(model_.get(), params_, prompt, options);
}

absl::Status Trainer::SaveCheckpoint(const std::string& path,
                                     const CheckpointExtras& extras) {
  CheckpointView view;
  view.config = config();
  view.params = &params_;
  view.adam_m = &adamw_.m();
  view.adam_v = &adamw_.v();
  view.adam_step = adamw_.step();
  view.step = step();
  view.data_cursor = sampler_.cursor();
  view.extras = &extras;
  return WriteCheckpoint(path, view);
}

absl::StatusOr<CheckpointExtras> Trainer::LoadCheckpoint(
    const std::string& path, const CheckpointCheck& check) {
  ASSIGN_OR_RETURN(auto state, ReadCheckpoint(path, model_->layout()));
  const ModelConfig& c = config();
  if (state->config.layers != c.layers || state->config.d_model != c.d_model ||
      state->config.heads != c.heads || state->config.context != c.context) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " is of another model config (layers ",
        state->config.layers, ", d_model ", state->config.d_model, ", heads ",
        state->config.heads, ", context ", state->config.context, ")"));
  }
  if (check) RETURN_IF_ERROR(check(state->extras));
  params_.CopyFrom(state->params);
  adamw_.m().CopyFrom(state->adam_m);
  adamw_.v().CopyFrom(state->adam_v);
  adamw_.set_step(state->adam_step);
  sampler_.set_cursor(state->data_cursor);
  grads_ready_ = false;
  return std::move(state->extras);
}

}  // namespace gasloc
