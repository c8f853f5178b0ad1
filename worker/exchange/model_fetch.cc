#include "worker/exchange/model_fetch.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

absl::Status ModelChunks(
    const ModelSnapshot& snapshot, uint64_t sender_id,
    v1::WireEncoding encoding, uint32_t chunk_bytes,
    const std::function<bool(const v1::ExchangeChunk&)>& write) {
  if (!snapshot.outer_state.empty() &&
      snapshot.outer_state.size() != snapshot.params.size())
    return absl::InternalError(absl::StrCat(
        "outer state has ", snapshot.outer_state.size(),
        " elements, params ", snapshot.params.size()));
  v1::ExchangeChunk chunk;
  for (auto [phase, data] :
       {std::pair{v1::EXCHANGE_PHASE_MODEL, snapshot.params},
        std::pair{v1::EXCHANGE_PHASE_OUTER_STATE, snapshot.outer_state}}) {
    ASSIGN_OR_RETURN(auto plan,
                     PlanChunks(0, data.size(), encoding, chunk_bytes));
    const ChunkContext context{
        TransferKey{snapshot.job_id, snapshot.round, phase, 0},
        sender_id,
        0,
        data.size(),
        encoding,
        data.size()};
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
                               uint64_t max_elements)
    : requester_id_(requester_id), max_elements_(max_elements) {
  model_.job_id = job_id;
}

absl::Status ModelAssembler::Start(const v1::ChunkHeader& h) {
  const uint64_t n = h.arena_elements();
  if (n > max_elements_)
    return absl::InvalidArgumentError(absl::StrCat(
        "sender announces ", n, " elements, more than the limit ",
        max_elements_));
  if (!started_) {
    if (h.phase() != v1::EXCHANGE_PHASE_MODEL)
      return absl::InvalidArgumentError(
          absl::StrCat("model fetch starts with phase ", PhaseName(h.phase()),
                       ", expected MODEL"));
    started_ = true;
    model_.round = h.round();
    model_.sender_id = h.sender_id();
    model_.params.assign(n, 0.0f);
  } else {
    if (h.phase() != v1::EXCHANGE_PHASE_OUTER_STATE)
      return absl::InvalidArgumentError(absl::StrCat(
          "after the MODEL part came phase ", PhaseName(h.phase()),
          ", expected OUTER_STATE"));
    if (n != 0 && n != model_.params.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "outer state has ", n, " elements, the model ",
          model_.params.size()));
    model_.outer_state.assign(n, 0.0f);
  }
  phase_ = h.phase();
  next_ = 0;
  return absl::OkStatus();
}

absl::Status ModelAssembler::Add(const v1::ExchangeChunk& chunk) {
  const v1::ChunkHeader& h = chunk.header();
  if (done_)
    return absl::InvalidArgumentError("chunk after the complete model");
  if (!started_ || (model_done_ && phase_ == v1::EXCHANGE_PHASE_MODEL))
    RETURN_IF_ERROR(Start(h));
  std::vector<float>& target = phase_ == v1::EXCHANGE_PHASE_MODEL
                                   ? model_.params
                                   : model_.outer_state;
  const ChunkExpectation expect{
      TransferKey{model_.job_id, model_.round, phase_, 0},
      model_.sender_id,
      requester_id_,
      0,
      target.size(),
      target.size()};
  if (h.offset() != next_ && h.phase() == phase_)
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk starts at element ", h.offset(), ", expected ", next_,
        " (chunks must arrive in order)"));
  RETURN_IF_ERROR(ValidateAndDecodeChunk(chunk, expect, target));
  next_ += h.length();
  if (chunk.last()) {
    if (next_ != target.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "last chunk of ", PhaseName(phase_), " ends at element ", next_,
          " of ", target.size()));
    if (phase_ == v1::EXCHANGE_PHASE_OUTER_STATE) done_ = true;
    model_done_ = true;
  } else if (next_ == target.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        PhaseName(phase_), " part is complete but its last flag is missing"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FetchedModel> ModelAssembler::Finish() {
  if (!done_)
    return absl::UnavailableError(absl::StrCat(
        "model fetch incomplete: ",
        !started_ ? "nothing arrived"
                  : absl::StrCat("stopped in ", PhaseName(phase_),
                                 " at element ", next_)));
  return std::move(model_);
}

}  // namespace gasloc
