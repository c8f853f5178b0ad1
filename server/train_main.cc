// gasloc-train: trains one model in a single process (no coordinator, no
// gRPC), evaluates it, checkpoints it, resumes it, and generates text from
// a checkpoint. docs/training.md describes the commands. Here: flags, the
// Options, the spec built from them, and the printing; the step loop and
// its evaluate / checkpoint / log cadence are worker/train/train_loop.h.
//
//   gasloc-train train --data=CORPUS --steps=N [--preset=S] [--checkpoint=F]
//   gasloc-train train --resume=F --steps=N ...
//   gasloc-train generate --checkpoint=F --prompt="ROMEO:"
//   gasloc-train export --checkpoint=F[,F...] --out=DIR [--dtype=fp32|bf16]
//   gasloc-train logits --checkpoint=F --prompt=TEXT   (JSON, for tests)
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags_setup.h"
#include "common/job_spec.h"
#include "common/omp_wait_policy.h"
#include "common/status_macros.h"
#include "worker/model/kernels.h"
#include "worker/train/export.h"
#include "worker/train/train_loop.h"
#include "worker/train/trainer.h"

ABSL_FLAG(std::string, data, "/usr/share/common-licenses",
          "Corpus: a file, or a directory whose files are concatenated.");
ABSL_FLAG(std::string, preset, "S",
          "Model and batch preset: S (4 layers, d 256, 4 heads, ctx 256, "
          "batch 16), M (6, 384, 6, 256, 16), D24 (24, 256, 8, 256, 8), or "
          "TINY (2, 64, 2, 64, 8).");
ABSL_FLAG(int, layers, 0, "Transformer blocks (0 = the preset's).");
ABSL_FLAG(int, d_model, 0, "Residual width (0 = the preset's).");
ABSL_FLAG(int, heads, 0, "Attention heads (0 = the preset's).");
ABSL_FLAG(int, context, 0, "Context length in bytes (0 = the preset's).");
ABSL_FLAG(int, batch, 0, "Sequences per step (0 = the preset's).");
ABSL_FLAG(int, threads, 2, "Compute threads (0 = all cores).");
ABSL_FLAG(std::string, precision, "fp32", "fp32 or bf16.");
ABSL_FLAG(std::string, mode, "global",
          "global (backprop through all blocks) or local-rgc (K stages on "
          "their own threads, readout-gradient consensus; docs/local_rgc.md).");
ABSL_FLAG(int, stages, 2, "local-rgc: stages K (1 .. layers).");
ABSL_FLAG(bool, async, false,
          "local-rgc: asynchronous pipeline instead of synchronous RGC.");
ABSL_FLAG(int64_t, steps, 1000, "Train until this many optimizer steps.");
ABSL_FLAG(double, lr, 1e-3, "Peak learning rate.");
ABSL_FLAG(int64_t, warmup, 100, "Warmup steps.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of initialisation and data sampling.");
ABSL_FLAG(double, train_fraction, 0.9,
          "Fraction of the corpus (from the start) used for training.");
ABSL_FLAG(int, eval_windows, 64, "Validation windows per evaluation.");
ABSL_FLAG(int64_t, eval_every, 100, "Evaluate every N steps (0 = at the end only).");
ABSL_FLAG(int64_t, log_every, 10, "Print a progress line every N steps.");
ABSL_FLAG(std::string, checkpoint, "",
          "train: checkpoint file to write (every --checkpoint_every steps "
          "and at the end); generate: checkpoint to read.");
ABSL_FLAG(int64_t, checkpoint_every, 0, "Checkpoint every N steps (0 = at the end only).");
ABSL_FLAG(std::string, resume, "", "Resume training from this checkpoint.");
ABSL_FLAG(std::string, prompt, "\n", "generate: the prompt.");
ABSL_FLAG(int, length, 300, "generate: bytes to generate.");
ABSL_FLAG(double, temperature, 0.8, "generate: sampling temperature (0 = greedy).");
ABSL_FLAG(int, top_k, 40, "generate: sample among the k most likely bytes (0 = all).");
ABSL_FLAG(std::string, out, "", "export: the directory to write.");
ABSL_FLAG(std::string, dtype, "fp32",
          "export: fp32 or bf16, the dtype of model.safetensors.");

namespace gasloc {
namespace {

struct TrainMainOptions {
  std::string data, preset, precision, checkpoint, resume, prompt, mode;
  std::string out, dtype;
  int stages = 2;
  bool async = false;
  int layers = 0, d_model = 0, heads = 0, context = 0, batch = 0, threads = 2;
  int eval_windows = 64, length = 300, top_k = 40;
  int64_t steps = 0, warmup = 0, eval_every = 0, log_every = 10,
          checkpoint_every = 0;
  double lr = 1e-3, train_fraction = 0.9, temperature = 0.8;
  uint64_t seed = 1;
};

TrainMainOptions OptionsFromFlags() {
  TrainMainOptions o;
  o.data = absl::GetFlag(FLAGS_data);
  o.preset = absl::GetFlag(FLAGS_preset);
  o.precision = absl::GetFlag(FLAGS_precision);
  o.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.prompt = absl::GetFlag(FLAGS_prompt);
  o.layers = absl::GetFlag(FLAGS_layers);
  o.d_model = absl::GetFlag(FLAGS_d_model);
  o.heads = absl::GetFlag(FLAGS_heads);
  o.context = absl::GetFlag(FLAGS_context);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.eval_windows = absl::GetFlag(FLAGS_eval_windows);
  o.length = absl::GetFlag(FLAGS_length);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.train_fraction = absl::GetFlag(FLAGS_train_fraction);
  o.temperature = absl::GetFlag(FLAGS_temperature);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.mode = absl::GetFlag(FLAGS_mode);
  o.stages = absl::GetFlag(FLAGS_stages);
  o.async = absl::GetFlag(FLAGS_async);
  o.out = absl::GetFlag(FLAGS_out);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  return o;
}

absl::StatusOr<v1::Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return v1::PRECISION_FP32;
  if (name == "bf16") return v1::PRECISION_BF16;
  return absl::InvalidArgumentError(
      absl::StrCat("--precision must be fp32 or bf16, got \"", name, "\""));
}

absl::StatusOr<v1::JobSpec> SpecFromOptions(const TrainMainOptions& o) {
  struct Preset {
    const char* name;
    int layers, d_model, heads, context, batch;
  };
  static constexpr Preset kPresets[] = {{"S", 4, 256, 4, 256, 16},
                                        {"M", 6, 384, 6, 256, 16},
                                        {"D24", 24, 256, 8, 256, 8},
                                        {"TINY", 2, 64, 2, 64, 8}};
  const Preset* preset = nullptr;
  for (const Preset& p : kPresets) {
    if (o.preset == p.name) preset = &p;
  }
  if (preset == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--preset must be S, M, D24 or TINY, got \"", o.preset, "\""));
  }
  if (o.steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps must be >= 1, got ", o.steps));
  }
  if (o.warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup must be >= 0, got ", o.warmup));
  }
  v1::JobSpec spec;
  spec.set_name("gasloc-train");
  auto* model = spec.mutable_model();
  model->set_layers(o.layers > 0 ? o.layers : preset->layers);
  model->set_d_model(o.d_model > 0 ? o.d_model : preset->d_model);
  model->set_heads(o.heads > 0 ? o.heads : preset->heads);
  model->set_context(o.context > 0 ? o.context : preset->context);
  auto* training = spec.mutable_training();
  training->set_batch(o.batch > 0 ? o.batch : preset->batch);
  training->set_threads(o.threads);
  ASSIGN_OR_RETURN(v1::Precision precision, ParsePrecision(o.precision));
  training->set_precision(precision);
  training->set_seed(o.seed);
  if (o.mode == "local-rgc") {
    if (o.stages < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--stages must be >= 1, got ", o.stages));
    }
    training->set_mode(v1::TRAIN_MODE_LOCAL_RGC);
    training->mutable_local_rgc()->set_stages(static_cast<uint32_t>(o.stages));
    training->mutable_local_rgc()->set_asynchronous(o.async);
  } else if (o.mode == "global") {
    training->set_mode(v1::TRAIN_MODE_GLOBAL);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode must be global or local-rgc, got \"", o.mode, "\""));
  }
  training->mutable_adamw()->set_lr(static_cast<float>(o.lr));
  training->mutable_adamw()->set_warmup_steps(static_cast<uint32_t>(o.warmup));
  training->mutable_adamw()->set_decay_steps(static_cast<uint64_t>(o.steps));
  spec.mutable_data()->set_corpus_path(o.data);
  spec.mutable_data()->set_train_fraction(static_cast<float>(o.train_fraction));
  spec.mutable_data()->set_eval_windows(o.eval_windows);
  spec.mutable_stop()->set_max_rounds(static_cast<uint64_t>(o.steps));
  spec.mutable_outer()->set_local_steps(1);
  return ApplyJobSpecDefaults(spec);
}

// Prints what the loop did: a progress line per --log_every steps, each
// evaluation and each checkpoint (docs/training.md names the lines; tests
// and scripts read them).
void PrintProgress(const TrainProgress& p) {
  const auto step = static_cast<unsigned long long>(p.step);
  switch (p.kind) {
    case TrainProgress::Kind::kLog:
      std::printf(
          "step %llu/%llu loss %.4f lr %.3e grad_norm %.3f ms/step %.1f "
          "tok/s %.0f\n",
          step, static_cast<unsigned long long>(p.steps), p.mean_loss, p.lr,
          p.grad_norm, p.ms_per_step, p.tokens_per_second);
      break;
    case TrainProgress::Kind::kEvaluated:
      std::printf("eval step %llu val_bpb %.4f\n", step, p.val_bpb);
      break;
    case TrainProgress::Kind::kCheckpointed:
      std::printf("checkpoint step %llu -> %s\n", step, p.path.c_str());
      break;
  }
  std::fflush(stdout);
}

absl::Status Train(const TrainMainOptions& o) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, SpecFromOptions(o));
  TrainerOptions options;
  options.spec = spec;
  options.threads = o.threads;
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options));
  if (!o.resume.empty()) {
    RETURN_IF_ERROR(trainer->LoadCheckpoint(o.resume).status());
    std::printf("resumed from %s at step %llu\n", o.resume.c_str(),
                static_cast<unsigned long long>(trainer->step()));
  }
  const ModelConfig& c = trainer->config();
  std::printf(
      "model layers %d d_model %d heads %d context %d params %zu | batch %d "
      "precision %s threads %d | corpus %s (%zu train / %zu validation bytes)\n",
      c.layers, c.d_model, c.heads, c.context,
      trainer->params().layout().parameter_count(), trainer->batch(),
      o.precision.c_str(), trainer->threads(), o.data.c_str(),
      trainer->corpus().train().size(), trainer->corpus().validation().size());
  std::printf("compute: %s\n", kernels::ComputeSummary().c_str());
  if (spec.training().mode() == v1::TRAIN_MODE_LOCAL_RGC) {
    std::printf("local RGC: %u stages, %s\n",
                spec.training().local_rgc().stages(),
                o.async ? "asynchronous pipeline" : "synchronous");
  }
  std::fflush(stdout);
  TrainLoopOptions loop;
  loop.steps = static_cast<uint64_t>(o.steps);
  loop.log_every = o.log_every;
  loop.eval_every = o.eval_every;
  loop.checkpoint_every = o.checkpoint_every;
  loop.checkpoint_path = o.checkpoint;
  loop.checkpoint_extras.values["gasloc-train.data"] =
      trainer->spec().data().corpus_path();
  return RunTrainLoop(loop, *trainer, PrintProgress);
}

// The model of --checkpoint (batch 1, --precision, --threads) and its state.
struct CheckpointModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<CheckpointState> state;
};
absl::StatusOr<CheckpointModel> LoadCheckpointModel(const TrainMainOptions& o,
                                                    absl::string_view command) {
  if (o.checkpoint.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(command, " needs --checkpoint=FILE"));
  }
  ASSIGN_OR_RETURN(ModelConfig config, ReadCheckpointConfig(o.checkpoint));
  ModelOptions model_options;
  model_options.threads = o.threads;
  ASSIGN_OR_RETURN(model_options.precision, ParsePrecision(o.precision));
  model_options.max_batch = 1;
  CheckpointModel out;
  ASSIGN_OR_RETURN(out.model, Model::Create(config, model_options));
  ASSIGN_OR_RETURN(out.state,
                   ReadCheckpoint(o.checkpoint, out.model->layout()));
  return out;
}

absl::Status Generate(const TrainMainOptions& o) {
  ASSIGN_OR_RETURN(CheckpointModel loaded, LoadCheckpointModel(o, "generate"));
  auto& [model, state] = loaded;
  GenerateOptions options;
  options.max_new_bytes = o.length;
  options.temperature = static_cast<float>(o.temperature);
  options.top_k = o.top_k;
  options.seed = o.seed;
  ASSIGN_OR_RETURN(std::string text,
                   GenerateText(model.get(), state->params, o.prompt, options));
  std::printf("%s%s\n", o.prompt.c_str(), text.c_str());
  return absl::OkStatus();
}

// Writes the checkpoint's model as DIR/model.safetensors + config.json
// (worker/train/export.h; docs/operations.md); with --checkpoint=A,B,...
// the mean of their models (a GASLoC job's members).
absl::Status Export(const TrainMainOptions& o) {
  if (o.checkpoint.empty() || o.out.empty()) {
    return absl::InvalidArgumentError(
        "export needs --checkpoint=FILE and --out=DIR");
  }
  ExportOptions options;
  if (o.dtype == "bf16") {
    options.dtype = ExportDtype::kBF16;
  } else if (o.dtype != "fp32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be fp32 or bf16, got \"", o.dtype, "\""));
  }
  options.values["source"] = o.checkpoint;
  RETURN_IF_ERROR(ExportCheckpoints(absl::StrSplit(o.checkpoint, ','), o.out,
                                    options));
  std::printf("exported %s -> %s/%s, %s/%s (%s)\n", o.checkpoint.c_str(),
              o.out.c_str(), kExportWeightsFile, o.out.c_str(),
              kExportConfigFile, o.dtype.c_str());
  return absl::OkStatus();
}

// Prints the next-byte logits after every prefix of --prompt (1 .. its
// length bytes, at most the context) as one JSON object, for comparing the
// model with other implementations (tests/deploy/model_export_test.py):
//   {"prompt": [bytes], "logits": [[256 floats] per prefix]}
absl::Status Logits(const TrainMainOptions& o) {
  ASSIGN_OR_RETURN(CheckpointModel loaded, LoadCheckpointModel(o, "logits"));
  auto& [model, state] = loaded;
  const ModelConfig& config = model->config();
  const auto* prompt = reinterpret_cast<const uint8_t*>(o.prompt.data());
  const int length =
      std::min(static_cast<int>(o.prompt.size()), config.context);
  if (length < 1) {
    return absl::InvalidArgumentError("logits needs a non-empty --prompt");
  }
  std::string json = "{\"prompt\": [";
  for (int i = 0; i < length; ++i) absl::StrAppend(&json, i ? ", " : "", prompt[i]);
  json += "], \"logits\": [";
  std::vector<float> logits(kVocabSize);
  for (int n = 1; n <= length; ++n) {
    RETURN_IF_ERROR(
        model->NextByteLogits(state->params, prompt, n, logits.data()));
    json += n > 1 ? ",\n[" : "\n[";
    for (int v = 0; v < kVocabSize; ++v)
      absl::StrAppendFormat(&json, "%s%.9g", v ? ", " : "", logits[v]);
    json += "]";
  }
  json += "]}\n";
  std::fputs(json.c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace gasloc

int main(int argc, char** argv) {
  // OpenMP threads sleep between parallel regions after a short spin
  // unless the user chose otherwise: long spins stall badly on shared cores
  // (docs/training.md, "Threads"). Re-executes to make it take effect.
  gasloc::EnsureOmpWaitPolicy(gasloc::kTrainingOmpWaitPolicy,
                              gasloc::kTrainingOmpSpinCount);
  const std::vector<std::string> args = gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-train: trains a byte-level transformer in one process.\n\n"
      "Usage:\n"
      "  gasloc-train train [--data=CORPUS] [--preset=S] [--steps=N] "
      "[--checkpoint=FILE [--checkpoint_every=K]] [--resume=FILE]\n"
      "  gasloc-train generate --checkpoint=FILE [--prompt=TEXT] "
      "[--length=N] [--temperature=T] [--top_k=K]\n"
      "  gasloc-train export --checkpoint=FILE[,FILE...] --out=DIR "
      "[--dtype=fp32|bf16]");
  using Command = absl::Status (*)(const gasloc::TrainMainOptions&);
  const std::pair<const char*, Command> commands[] = {
      {"train", gasloc::Train},
      {"generate", gasloc::Generate},
      {"export", gasloc::Export},
      {"logits", gasloc::Logits}};  // undocumented: JSON for tests
  Command command = nullptr;
  for (const auto& [name, run] : commands) {
    if (args.size() == 2 && args[1] == name) command = run;
  }
  if (command == nullptr) {
    std::fprintf(stderr,
                 "gasloc-train: expected one command, train, generate or "
                 "export (see --help)\n");
    return 2;
  }
  const gasloc::TrainMainOptions options = gasloc::OptionsFromFlags();
  const absl::Status status = command(options);
  if (!status.ok()) {
    std::fprintf(stderr, "gasloc-train %s: %s\n", args[1].c_str(),
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
