#include "worker/exchange/model_fetch.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

namespace {

// The parts of a FetchModel stream, in the order they are sent.
constexpr v1::ExchangePhase kParts[] = {
    v1::EXCHANGE_PHASE_MODEL, v1::EXCHANGE_PHASE_OUTER_STATE,
    v1::EXCHANGE_PHASE_OPTIMIZER_M, v1::EXCHANGE_PHASE_OPTIMIZER_V};
constexpr int kRequiredParts = 2;  // MODEL and OUTER_STATE
constexpr int kNumParts = 4;

bool IsOptimizerPart(int part) { return part >= kRequiredParts; }

}  // namespace

absl::Status ModelChunks(
    const ModelSnapshot& snapshot, uint64_t sender_id,
    v1::WireEncoding encoding, uint32_t chunk_bytes,
    const std::function<bool(const v1::ExchangeChunk&)>& write) {
  if (encoding == v1::WIRE_ENCODING_INT8)
    return absl::InvalidArgumentError(
        "FetchModel sends FP32 (lossless, the default) or BF16, not INT8: "
        "INT8 is the all-reduce's pseudo-gradient encoding, whose rounding "
        "error feedback carries to the next round; a model sent at 8 bits "
        "would lose it for good");
  const size_t n = snapshot.params.size();
  if (!snapshot.outer_state.empty() && snapshot.outer_state.size() != n)
    return absl::InternalError(absl::StrCat(
        "outer state has ", snapshot.outer_state.size(), " elements, params ",
        n));
  const bool has_optimizer = !snapshot.optimizer_m.empty();
  if (has_optimizer && (snapshot.optimizer_m.size() != n ||
                        snapshot.optimizer_v.size() != n))
    return absl::InternalError(absl::StrCat(
        "optimizer moments have ", snapshot.optimizer_m.size(), " and ",
        snapshot.optimizer_v.size(), " elements, params ", n));
  const std::span<const float> parts[] = {
      snapshot.params, snapshot.outer_state, snapshot.optimizer_m,
      snapshot.optimizer_v};
  v1::ExchangeChunk chunk;
  for (int part = 0; part < (has_optimizer ? kNumParts : kRequiredParts);
       ++part) {
    const std::span<const float> data = parts[part];
    ASSIGN_OR_RETURN(auto plan,
                     PlanChunks(0, data.size(), encoding, chunk_bytes));
    // The chunk header's step is 32 bits; 4 billion AdamW steps is beyond
    // any job this service runs, so refuse rather than wrap.
    if (snapshot.optimizer_step > std::numeric_limits<uint32_t>::max())
      return absl::InternalError(absl::StrCat(
          "AdamW step ", snapshot.optimizer_step, " does not fit a chunk header"));
    const auto step = static_cast<uint32_t>(
        IsOptimizerPart(part) ? snapshot.optimizer_step : 0);
    const ChunkContext context{
        .key = TransferKey{.job_id = snapshot.job_id,
                           .round = snapshot.round,
                           .phase = kParts[part],
                           .step = step},
        .sender_id = sender_id,
        .range_begin = 0,
        .range_end = data.size(),
        .encoding = encoding,
        .arena_elements = data.size()};
    for (size_t i = 0; i < plan.size(); ++i) {
      RETURN_IF_ERROR(
          EncodeChunk(context, data, plan[i], i + 1 == plan.size(), &chunk));
      if (!write(chunk))
        return absl::CancelledError("the receiver stopped reading");
    }
  }
  return absl::OkStatus();
}

ModelAssembler::ModelAssembler(uint64_t job_id, uint64_t requester_id,
                               uint64_t max_elements,
                               uint64_t expected_elements)
    : requester_id_(requester_id),
      max_elements_(max_elements),
      expected_elements_(expected_elements) {
  model_.job_id = job_id;
}

std::vector<float>& ModelAssembler::Target() {
  switch (kParts[part_]) {
    case v1::EXCHANGE_PHASE_MODEL: return model_.params;
    case v1::EXCHANGE_PHASE_OUTER_STATE: return model_.outer_state;
    case v1::EXCHANGE_PHASE_OPTIMIZER_M: return model_.optimizer_m;
    default: return model_.optimizer_v;
  }
}

absl::Status ModelAssembler::Start(const v1::ChunkHeader& h) {
  const int part = part_ + 1;
  if (part >= kNumParts)
    return absl::InvalidArgumentError("chunk after the complete model");
  if (h.phase() != kParts[part])
    return absl::InvalidArgumentError(absl::StrCat(
        part == 0 ? "model fetch starts with phase "
                  : absl::StrCat("after the ", PhaseName(kParts[part_]),
                                 " part came phase "),
        PhaseName(h.phase()), ", expected ", PhaseName(kParts[part])));
  const uint64_t n = h.arena_elements();
  if (n > max_elements_)
    return absl::InvalidArgumentError(absl::StrCat(
        "sender announces ", n, " elements, more than the limit ",
        max_elements_));
  if (part == 0 && expected_elements_ != 0 && n != expected_elements_)
    return absl::InvalidArgumentError(absl::StrCat(
        "sender announces a model of ", n, " elements, this job's model has ",
        expected_elements_));
  if (part == 0) {
    model_.round = h.round();
    model_.sender_id = h.sender_id();
  } else if (n != model_.params.size() &&
             (n != 0 || IsOptimizerPart(part))) {
    return absl::InvalidArgumentError(absl::StrCat(
        PhaseName(h.phase()), " has ", n, " elements, the model ",
        model_.params.size()));
  }
  if (part == kNumParts - 1 && h.step() != model_.optimizer_step)
    return absl::InvalidArgumentError(absl::StrCat(
        "OPTIMIZER_V is of AdamW step ", h.step(), ", OPTIMIZER_M of step ",
        model_.optimizer_step));
  part_ = part;
  part_complete_ = false;
  part_step_ = IsOptimizerPart(part) ? h.step() : 0;
  if (IsOptimizerPart(part)) model_.optimizer_step = h.step();
  Target().assign(n, 0.0f);
  next_ = 0;
  return absl::OkStatus();
}

absl::Status ModelAssembler::Add(const v1::ExchangeChunk& chunk) {
  const v1::ChunkHeader& h = chunk.header();
  if (part_ < 0 || part_complete_) RETURN_IF_ERROR(Start(h));
  std::vector<float>& target = Target();
  const ChunkExpectation expect{
      .key = TransferKey{.job_id = model_.job_id,
                         .round = model_.round,
                         .phase = kParts[part_],
                         .step = part_step_},
      .sender_id = model_.sender_id,
      .receiver_id = requester_id_,
      .range_begin = 0,
      .range_end = target.size(),
      .arena_elements = target.size()};
  if (h.offset() != next_ && h.phase() == kParts[part_])
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk starts at element ", h.offset(), ", expected ", next_,
        " (chunks must arrive in order)"));
  RETURN_IF_ERROR(ValidateAndDecodeChunk(chunk, expect, target));
  next_ += h.length();
  if (chunk.last()) {
    if (next_ != target.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "last chunk of ", PhaseName(kParts[part_]), " ends at element ",
          next_, " of ", target.size()));
    part_complete_ = true;
  } else if (next_ == target.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(PhaseName(kParts[part_]),
                     " part is complete but its last flag is missing"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FetchedModel> ModelAssembler::Finish() {
  // Complete = the last part received is finished and is OUTER_STATE or
  // OPTIMIZER_V: a started optimizer part must be finished too.
  const int complete_parts = part_complete_ ? part_ + 1 : 0;
  if (complete_parts != kRequiredParts && complete_parts != kNumParts)
    return absl::UnavailableError(absl::StrCat(
        "model fetch incomplete: ",
        part_ < 0 ? "nothing arrived"
                  : absl::StrCat("stopped in ", PhaseName(kParts[part_]),
                                 " at element ", next_)));
  return std::move(model_);
}

}  // namespace gasloc
