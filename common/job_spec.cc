#include "common/job_spec.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace gasloc {
namespace {

using v1::Algorithm;

// Range checks that produce "<field> must be in [lo, hi], got v".
absl::Status CheckRange(absl::string_view field, double value, double lo,
                        double hi, bool lo_open = false, bool hi_open = false) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) &&
                  (hi_open ? value < hi : value <= hi);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " must be in ", lo_open ? "(" : "[", lo, ", ", hi,
      hi_open ? ")" : "]", ", got ", value));
}

#define GASLOC_CHECK_RANGE(...)                       \
  do {                                                \
    absl::Status s_ = CheckRange(__VA_ARGS__);        \
    if (!s_.ok()) return s_;                          \
  } while (false)

// A path field: at most kMaxPathBytes, no NUL byte (the OS would cut it).
absl::Status CheckPath(absl::string_view field, absl::string_view path) {
  if (path.size() > kMaxPathBytes)
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be at most ", kMaxPathBytes,
                     " bytes, got ", path.size()));
  if (path.find('\0') != absl::string_view::npos)
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must not contain a NUL byte"));
  // proto3 strings are UTF-8: the coordinator could not even parse it.
  if (std::optional<size_t> bad = FirstInvalidUtf8(path))
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be UTF-8; byte ", *bad, " (0x",
        absl::Hex(static_cast<uint8_t>(path[*bad]), absl::kZeroPad2),
        ") is not"));
  return absl::OkStatus();
}

// training.schedule_horizon names a stop limit that is set, and
// adamw.decay_steps (a horizon in steps) goes with ROUNDS only.
absl::Status CheckScheduleHorizon(const v1::JobSpec& spec) {
  const v1::ScheduleHorizon h = spec.training().schedule_horizon();
  if (!v1::ScheduleHorizon_IsValid(h))
    return absl::InvalidArgumentError(
        "training.schedule_horizon is not a known value");
  const v1::StopCondition& s = spec.stop();
  const uint64_t decay_steps = spec.training().adamw().decay_steps();
  const std::string name = v1::ScheduleHorizon_Name(h);
  if (h == v1::SCHEDULE_HORIZON_ROUNDS && s.max_rounds() == 0 &&
      decay_steps == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "training.schedule_horizon ", name, " needs stop.max_rounds or "
        "training.adamw.decay_steps (the horizon in steps); neither is set"));
  if (h == v1::SCHEDULE_HORIZON_TOKENS && s.max_tokens() == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "training.schedule_horizon ", name, " needs stop.max_tokens, which "
        "is not set"));
  if (h == v1::SCHEDULE_HORIZON_SECONDS && s.max_wall_seconds() == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "training.schedule_horizon ", name, " needs stop.max_wall_seconds, "
        "which is not set"));
  if (h != v1::SCHEDULE_HORIZON_ROUNDS && decay_steps > 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "training.adamw.decay_steps must be 0 with training.schedule_horizon ",
        name, " (it is a horizon in steps, for SCHEDULE_HORIZON_ROUNDS), got ",
        decay_steps));
  return absl::OkStatus();
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-')
      return false;
  }
  return true;
}

}  // namespace

bool IsGossipAlgorithm(Algorithm algorithm) {
  return algorithm == v1::ALGORITHM_GASLOC || algorithm == v1::ALGORITHM_DPSGD ||
         algorithm == v1::ALGORITHM_UNSPECIFIED;
}

uint32_t MaxGossipDegree(v1::Topology topology) {
  switch (topology) {
    case v1::TOPOLOGY_RANDOM_TWO_PEER:
    case v1::TOPOLOGY_RING:
      return 2;
    case v1::TOPOLOGY_COMPLETE:
      return 0;  // every other worker; weights 1/n
    default:
      return 1;
  }
}

uint64_t ModelParameterCount(const v1::ModelSpec& model) {
  const uint64_t L = model.layers(), d = model.d_model(), T = model.context();
  return L * (12 * d * d + 13 * d) + d * (2 * 256 + T + 2);
}

v1::ScheduleHorizon ScheduleHorizonOf(const v1::JobSpec& spec) {
  const v1::ScheduleHorizon set = spec.training().schedule_horizon();
  if (set != v1::SCHEDULE_HORIZON_UNSPECIFIED) return set;
  const v1::StopCondition& s = spec.stop();
  const bool rounds_only =
      s.max_rounds() > 0 && s.max_tokens() == 0 && s.max_wall_seconds() == 0;
  return spec.training().adamw().decay_steps() > 0 || rounds_only
             ? v1::SCHEDULE_HORIZON_ROUNDS
             : v1::SCHEDULE_HORIZON_STOP;
}

v1::JobSpec ApplyJobSpecDefaults(const v1::JobSpec& in) {
  v1::JobSpec spec = in;
  auto* model = spec.mutable_model();
  if (!model->has_layers()) model->set_layers(4);
  if (!model->has_d_model()) model->set_d_model(256);
  if (!model->has_heads()) model->set_heads(4);
  if (!model->has_context()) model->set_context(256);

  auto* training = spec.mutable_training();
  if (!training->has_batch()) training->set_batch(16);
  if (!training->has_threads()) training->set_threads(0);
  if (training->precision() == v1::PRECISION_UNSPECIFIED)
    training->set_precision(v1::PRECISION_FP32);
  if (training->mode() == v1::TRAIN_MODE_UNSPECIFIED)
    training->set_mode(v1::TRAIN_MODE_GLOBAL);
  if (!training->local_rgc().has_stages())
    training->mutable_local_rgc()->set_stages(
        std::min<uint32_t>(2, std::max<uint32_t>(1, model->layers())));
  if (!training->local_rgc().has_asynchronous())
    training->mutable_local_rgc()->set_asynchronous(false);
  if (!training->local_rgc().has_threads_per_stage())
    training->mutable_local_rgc()->set_threads_per_stage(0);
  if (!training->has_seed()) training->set_seed(1);
  auto* adamw = training->mutable_adamw();
  if (!adamw->has_lr()) adamw->set_lr(1e-3f);
  if (!adamw->has_warmup_steps()) adamw->set_warmup_steps(100);
  if (!adamw->has_decay_steps()) adamw->set_decay_steps(0);
  if (!adamw->has_min_lr_ratio()) adamw->set_min_lr_ratio(0.1f);
  if (!adamw->has_beta1()) adamw->set_beta1(0.9f);
  if (!adamw->has_beta2()) adamw->set_beta2(0.95f);
  if (!adamw->has_eps()) adamw->set_eps(1e-8f);
  if (!adamw->has_weight_decay()) adamw->set_weight_decay(0.1f);
  if (!adamw->has_grad_clip()) adamw->set_grad_clip(1.0f);
  training->set_schedule_horizon(ScheduleHorizonOf(spec));

  auto* data = spec.mutable_data();
  if (!data->has_train_fraction()) data->set_train_fraction(0.9f);
  if (!data->has_eval_windows()) data->set_eval_windows(64);
  if (!data->has_eval_interval_rounds()) data->set_eval_interval_rounds(1);

  auto* outer = spec.mutable_outer();
  if (outer->algorithm() == v1::ALGORITHM_UNSPECIFIED)
    outer->set_algorithm(v1::ALGORITHM_GASLOC);
  const Algorithm algo = outer->algorithm();
  const bool dpsgd = algo == v1::ALGORITHM_DPSGD;
  const bool local_sgd = algo == v1::ALGORITHM_LOCAL_SGD;
  if (!outer->has_eta()) outer->set_eta(dpsgd ? 1.0f : 0.7f);
  if (!outer->has_gamma()) outer->set_gamma(dpsgd ? 0.0f : 0.9f);
  if (!outer->has_alpha()) outer->set_alpha(0.5f);
  if (!outer->has_lambda()) outer->set_lambda(1.0f);
  if (!outer->has_lr()) outer->set_lr(local_sgd ? 1.0f : 0.7f);
  if (!outer->has_mu()) outer->set_mu(local_sgd ? 0.0f : 0.9f);
  if (dpsgd || algo == v1::ALGORITHM_DATA_PARALLEL) {
    outer->set_local_steps(1);
  } else if (!outer->has_local_steps()) {
    outer->set_local_steps(100);
  }
  if (!outer->has_min_local_steps())
    outer->set_min_local_steps(std::max<uint32_t>(1, outer->local_steps() / 10));
  if (outer->overlap_update() == v1::OVERLAP_UPDATE_MERGE &&
      !outer->has_overlap_merge_alpha())
    outer->set_overlap_merge_alpha(0.5f);
  if (outer->topology() == v1::TOPOLOGY_UNSPECIFIED)
    outer->set_topology(IsGossipAlgorithm(algo) ? v1::TOPOLOGY_RANDOM_ONE_PEER
                                                : v1::TOPOLOGY_COMPLETE);
  // Measured (docs/benchmarks.md, "Momentum placement"): only the
  // pseudo-gradient placement keeps training through injected faults.
  if (outer->momentum_placement() == v1::MOMENTUM_PLACEMENT_UNSPECIFIED)
    outer->set_momentum_placement(v1::MOMENTUM_PLACEMENT_PSEUDO_GRADIENT);
  if (outer->budget_policy() == v1::BUDGET_POLICY_UNSPECIFIED)
    outer->set_budget_policy(algo == v1::ALGORITHM_GASLOC
                                 ? v1::BUDGET_POLICY_ADAPTIVE
                                 : v1::BUDGET_POLICY_UNIFORM);

  auto* exchange = spec.mutable_exchange();
  if (exchange->encoding() == v1::WIRE_ENCODING_UNSPECIFIED)
    exchange->set_encoding(v1::WIRE_ENCODING_FP32);
  if (!exchange->has_chunk_bytes()) exchange->set_chunk_bytes(1u << 20);
  if (!exchange->has_deadline_ms()) exchange->set_deadline_ms(30000);
  if (!exchange->has_poison_distance_ratio())
    exchange->set_poison_distance_ratio(10.0f);

  if (!spec.checkpoint().has_interval_rounds())
    spec.mutable_checkpoint()->set_interval_rounds(10);
  if (!spec.has_min_workers()) spec.set_min_workers(1);
  if (!spec.has_max_workers()) spec.set_max_workers(0);
  if (!spec.has_max_consecutive_round_failures())
    spec.set_max_consecutive_round_failures(
        kDefaultMaxConsecutiveRoundFailures);
  return spec;
}

absl::Status ValidateJobSpec(const v1::JobSpec& raw) {
  const v1::JobSpec spec = ApplyJobSpecDefaults(raw);
  if (!ValidName(spec.name()))
    return absl::InvalidArgumentError(absl::StrCat(
        "name must match [A-Za-z0-9._-]{1,64}, got \"", spec.name(), "\""));

  const auto& m = spec.model();
  // Absolute caps (docs/operations.md, "Limits"): a spec is remote control
  // of every worker's memory, so sizes stop well before what would wrap or
  // exhaust a machine; the memory estimate (common/job_size.h) is checked
  // against the workers too.
  GASLOC_CHECK_RANGE("model.layers", m.layers(), 1, kMaxLayers);
  GASLOC_CHECK_RANGE("model.d_model", m.d_model(), 8, kMaxDModel);
  GASLOC_CHECK_RANGE("model.heads", m.heads(), 1, 128);
  if (m.d_model() % m.heads() != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("model.heads must divide model.d_model, got d_model ",
                     m.d_model(), " and heads ", m.heads()));
  GASLOC_CHECK_RANGE("model.context", m.context(), 2, kMaxContext);
  RETURN_IF_ERROR(CheckPath("model.init_from", m.init_from()));

  const auto& t = spec.training();
  GASLOC_CHECK_RANGE("training.batch", t.batch(), 1, kMaxBatch);
  GASLOC_CHECK_RANGE("training.threads", t.threads(), 0, kMaxThreads);
  if (!v1::Precision_IsValid(t.precision()))
    return absl::InvalidArgumentError("training.precision is not a known value");
  if (!v1::TrainMode_IsValid(t.mode()))
    return absl::InvalidArgumentError("training.mode is not a known value");
  if (t.mode() == v1::TRAIN_MODE_LOCAL_RGC) {
    GASLOC_CHECK_RANGE("training.local_rgc.stages", t.local_rgc().stages(), 1,
                       m.layers());
    GASLOC_CHECK_RANGE("training.local_rgc.threads_per_stage",
                       t.local_rgc().threads_per_stage(), 0, kMaxThreads);
  }
  const auto& a = t.adamw();
  GASLOC_CHECK_RANGE("training.adamw.lr", a.lr(), 0, 1, /*lo_open=*/true);
  GASLOC_CHECK_RANGE("training.adamw.warmup_steps", a.warmup_steps(), 0, 1e9);
  GASLOC_CHECK_RANGE("training.adamw.decay_steps",
                     static_cast<double>(a.decay_steps()), 0, 1e12);
  GASLOC_CHECK_RANGE("training.adamw.min_lr_ratio", a.min_lr_ratio(), 0, 1);
  GASLOC_CHECK_RANGE("training.adamw.beta1", a.beta1(), 0, 1, false, true);
  GASLOC_CHECK_RANGE("training.adamw.beta2", a.beta2(), 0, 1, false, true);
  GASLOC_CHECK_RANGE("training.adamw.eps", a.eps(), 0, 1, true, true);
  GASLOC_CHECK_RANGE("training.adamw.weight_decay", a.weight_decay(), 0, 1,
                     false, true);
  GASLOC_CHECK_RANGE("training.adamw.grad_clip", a.grad_clip(), 0, 1e6);

  const auto& d = spec.data();
  if (d.corpus_path().empty())
    return absl::InvalidArgumentError("data.corpus_path is required");
  RETURN_IF_ERROR(CheckPath("data.corpus_path", d.corpus_path()));
  RETURN_IF_ERROR(
      CheckPath("checkpoint.directory", spec.checkpoint().directory()));
  GASLOC_CHECK_RANGE("data.train_fraction", d.train_fraction(), 0, 1, true,
                     true);
  GASLOC_CHECK_RANGE("data.eval_windows", d.eval_windows(), 1, 100000);
  GASLOC_CHECK_RANGE("data.eval_interval_rounds", d.eval_interval_rounds(), 0,
                     1e6);

  const auto& o = spec.outer();
  if (!v1::Algorithm_IsValid(o.algorithm()))
    return absl::InvalidArgumentError("outer.algorithm is not a known value");
  GASLOC_CHECK_RANGE("outer.eta", o.eta(), 0, 10, true);
  GASLOC_CHECK_RANGE("outer.gamma", o.gamma(), 0, 1, false, true);
  GASLOC_CHECK_RANGE("outer.alpha", o.alpha(), 0, 1, true);
  GASLOC_CHECK_RANGE("outer.lambda", o.lambda(), 0, 1, true);
  GASLOC_CHECK_RANGE("outer.lr", o.lr(), 0, 10, true);
  GASLOC_CHECK_RANGE("outer.mu", o.mu(), 0, 1, false, true);
  GASLOC_CHECK_RANGE("outer.local_steps", o.local_steps(), 1, 1e6);
  GASLOC_CHECK_RANGE("outer.min_local_steps", o.min_local_steps(), 1,
                     o.local_steps());
  if (!v1::Topology_IsValid(o.topology()))
    return absl::InvalidArgumentError("outer.topology is not a known value");
  if (!IsGossipAlgorithm(o.algorithm()) && o.topology() != v1::TOPOLOGY_COMPLETE)
    return absl::InvalidArgumentError(absl::StrCat(
        "outer.topology must be TOPOLOGY_COMPLETE for ",
        v1::Algorithm_Name(o.algorithm()), " (it all-reduces), got ",
        v1::Topology_Name(o.topology())));
  if (IsGossipAlgorithm(o.algorithm()) &&
      o.topology() != v1::TOPOLOGY_COMPLETE) {
    // Metropolis-style weights (coordinator/schedule.h RoundWeights): an
    // edge of ends with at most D peers weighs alpha lambda 2 / (1 + D), so
    // the mixing matrix's eigenvalues are > -1 iff alpha lambda <
    // (1 + D) / (2 D) (tight for a D-regular bipartite round graph).
    const uint32_t max_degree = MaxGossipDegree(o.topology());
    const double step = static_cast<double>(o.alpha()) * o.lambda();
    const double bound = (1.0 + max_degree) / (2.0 * max_degree);
    if (step >= bound)
      return absl::InvalidArgumentError(absl::StrCat(
          "outer.alpha x outer.lambda must be below ", bound, " for ",
          v1::Topology_Name(o.topology()), " (up to ", max_degree,
          " peers a round), got ", o.alpha(), " x ", o.lambda(),
          ": the gossip mixing matrix would not contract (eigenvalue -1)"));
  }
  if (o.overlap_exchange() && o.algorithm() == v1::ALGORITHM_DATA_PARALLEL)
    return absl::InvalidArgumentError(
        "outer.overlap_exchange is for the algorithms that exchange once a "
        "round (GASLoC, D-PSGD, DiLoCo, local SGD): data-parallel "
        "all-reduces every step's gradient, and a step cannot run beside "
        "its own gradient's reduction");
  if (!v1::OverlapUpdate_IsValid(o.overlap_update()))
    return absl::InvalidArgumentError(
        "outer.overlap_update is not a known value");
  if (o.overlap_update() != v1::OVERLAP_UPDATE_UNSPECIFIED &&
      !o.overlap_exchange())
    return absl::InvalidArgumentError(absl::StrCat(
        "outer.overlap_update ", v1::OverlapUpdate_Name(o.overlap_update()),
        " needs outer.overlap_exchange: without the overlap the outer step "
        "always waits for the exchange"));
  if (o.overlap_update() == v1::OVERLAP_UPDATE_EAGER &&
      o.algorithm() != v1::ALGORITHM_DILOCO)
    return absl::InvalidArgumentError(absl::StrCat(
        "outer.overlap_update OVERLAP_UPDATE_EAGER is DiLoCo's (its "
        "all-reduced pseudo-gradient), not ",
        v1::Algorithm_Name(o.algorithm()), "'s"));
  if (o.overlap_update() == v1::OVERLAP_UPDATE_MERGE &&
      IsGossipAlgorithm(o.algorithm()))
    return absl::InvalidArgumentError(absl::StrCat(
        "outer.overlap_update OVERLAP_UPDATE_MERGE merges with the "
        "all-reduce's global model (DiLoCo, local SGD); ",
        v1::Algorithm_Name(o.algorithm()), " gossips and has none"));
  if (o.has_overlap_merge_alpha()) {
    if (o.overlap_update() != v1::OVERLAP_UPDATE_MERGE)
      return absl::InvalidArgumentError(
          "outer.overlap_merge_alpha is set but outer.overlap_update is not "
          "OVERLAP_UPDATE_MERGE: nothing would use it");
    GASLOC_CHECK_RANGE("outer.overlap_merge_alpha", o.overlap_merge_alpha(), 0,
                       1, false, true);
  }
  if (o.has_max_round_lead()) {
    if (!IsGossipAlgorithm(o.algorithm()))
      return absl::InvalidArgumentError(absl::StrCat(
          "outer.max_round_lead is for the gossip algorithms (GASLoC, "
          "D-PSGD); ",
          v1::Algorithm_Name(o.algorithm()),
          " all-reduces, and its rounds already wait for every member"));
    GASLOC_CHECK_RANGE("outer.max_round_lead", o.max_round_lead(), 0, 1000);
  }
  if (!v1::MomentumPlacement_IsValid(o.momentum_placement()))
    return absl::InvalidArgumentError(
        "outer.momentum_placement is not a known value");
  if (!v1::BudgetPolicy_IsValid(o.budget_policy()))
    return absl::InvalidArgumentError(
        "outer.budget_policy is not a known value");

  const auto& e = spec.exchange();
  if (!v1::WireEncoding_IsValid(e.encoding()))
    return absl::InvalidArgumentError("exchange.encoding is not a known value");
  GASLOC_CHECK_RANGE("exchange.chunk_bytes", e.chunk_bytes(), 4096, 3 << 20);
  GASLOC_CHECK_RANGE("exchange.deadline_ms", e.deadline_ms(), 100, 3600000);
  if (e.poison_distance_ratio() != 0)
    GASLOC_CHECK_RANGE("exchange.poison_distance_ratio",
                       e.poison_distance_ratio(), 2, 1e6);

  GASLOC_CHECK_RANGE("checkpoint.interval_rounds",
                     spec.checkpoint().interval_rounds(), 1, 1e6);
  const auto& s = spec.stop();
  if (s.max_rounds() == 0 && s.max_tokens() == 0 && s.max_wall_seconds() == 0)
    return absl::InvalidArgumentError(
        "stop must set at least one of max_rounds, max_tokens, "
        "max_wall_seconds");
  GASLOC_CHECK_RANGE("stop.max_rounds", static_cast<double>(s.max_rounds()), 0,
                     1e9);
  RETURN_IF_ERROR(CheckScheduleHorizon(spec));
  GASLOC_CHECK_RANGE("min_workers", spec.min_workers(), 1, 100000);
  GASLOC_CHECK_RANGE("max_workers", spec.max_workers(), 0, 100000);
  if (spec.max_workers() != 0 && spec.max_workers() < spec.min_workers())
    return absl::InvalidArgumentError(absl::StrCat(
        "max_workers must be 0 or >= min_workers (", spec.min_workers(),
        "), got ", spec.max_workers()));
  GASLOC_CHECK_RANGE("max_consecutive_round_failures",
                     spec.max_consecutive_round_failures(), 1, 1000);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text) {
  v1::JobSpec spec;
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed.front() == '{') {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    auto status = google::protobuf::util::JsonStringToMessage(
        std::string(trimmed), &spec, options);
    if (!status.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("job spec JSON: ", std::string(status.message())));
    return spec;
  }
  struct Collector : google::protobuf::io::ErrorCollector {
    std::string errors;
    void AddError(int line, int column, const std::string& message) override {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", "line ", line + 1,
                      " column ", column + 1, ": ", message);
    }
  } collector;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(std::string(text), &spec))
    return absl::InvalidArgumentError(
        absl::StrCat("job spec text format: ", collector.errors));
  return spec;
}

}  // namespace gasloc
