// RoundRunner's model state in and out: a member's model installed (a
// joining worker, a re-sync), the re-syncs themselves, and checkpoints.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/round/round_runner.h"

namespace gasloc {
namespace {

constexpr char kPrevIterate[] = "outer.y_prev";
constexpr char kMomentum[] = "outer.momentum";
constexpr char kNextRound[] = "outer.next_round";
constexpr char kJobId[] = "outer.job_id";
// The next round's start point when the parameters are ahead of it (an
// overlapped round's mixed point, OuterBuffers::start_carried); absent
// otherwise.
constexpr char kRoundStart[] = "outer.round_start";

}  // namespace

absl::Status RoundRunner::InstallFetchedModel(const FetchedModel& model) {
  FloatArena& params = trainer_->params();
  const size_t n = params.size();
  FloatArena* m = trainer_->optimizer_m();
  FloatArena* v = trainer_->optimizer_v();
  const bool with_optimizer = !model.optimizer_m.empty() && m != nullptr &&
                              v != nullptr;
  auto mismatch = [&](const char* part, size_t got) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", model.sender_id, " sent ", part, " of ", got,
        " floats; this job's model has ", n));
  };
  if (model.params.size() != n) return mismatch("parameters", model.params.size());
  if (!model.outer_state.empty() && model.outer_state.size() != n)
    return mismatch("an outer state", model.outer_state.size());
  if (with_optimizer &&
      (model.optimizer_m.size() != n || model.optimizer_v.size() != n))
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", model.sender_id, " sent optimizer moments of ",
        model.optimizer_m.size(), " and ", model.optimizer_v.size(),
        " floats; this job's model has ", n));
  std::copy(model.params.begin(), model.params.end(), params.data());
  // A member's parameters come without its round start: the next round
  // starts from them (the member's steps beside its last exchange count
  // there as local change of weight 1).
  buffers_.start_carried = false;
  if (!model.outer_state.empty())
    std::copy(model.outer_state.begin(), model.outer_state.end(),
              outer_state().data());
  if (with_optimizer) {
    std::copy(model.optimizer_m.begin(), model.optimizer_m.end(), m->data());
    std::copy(model.optimizer_v.begin(), model.optimizer_v.end(), v->data());
    trainer_->set_optimizer_step(model.optimizer_step);
  }
  next_round_ = model.round;
  return absl::OkStatus();
}

void RoundRunner::ResyncFromSource(const v1::Assignment& assignment,
                                   v1::ReportRoundRequest* report) {
  const v1::PeerAssignment& source = assignment.resync_source();
  absl::Status status =
      resync_fetcher_ ? absl::OkStatus()
                      : absl::FailedPreconditionError("no fetcher installed");
  absl::StatusOr<FetchedModel> model;
  if (status.ok()) {
    model = resync_fetcher_(source);
    status = model.status();
  }
  if (status.ok() && model->round != assignment.round())
    status = absl::FailedPreconditionError(absl::StrCat(
        "its model is at next round ", model->round, ", not ",
        assignment.round()));
  if (status.ok()) status = InstallFetchedModel(*model);
  if (!status.ok()) {
    // Train on with our own model; the next round's checksum flags it again.
    GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                        << assignment.round()
                        << ": the coordinator found this replica apart from "
                           "the others, but re-synchronising from worker "
                        << source.worker_id() << " failed: " << status;
    report->set_failure_reason(absl::StrCat(
        "re-sync from worker ", source.worker_id(), " failed: ",
        status.ToString()));
    return;
  }
  ++resyncs_;
  report->set_resynced_from(source.worker_id());
  GASLOC_LOG(INFO) << "job " << options_.job_id << " round "
                   << assignment.round()
                   << ": replica re-synchronised from worker "
                   << source.worker_id()
                   << " before the round (the coordinator found it apart "
                      "from the majority after the previous round)";
}

bool RoundRunner::ResyncAfterRingFailure(
    const v1::Assignment& assignment, const std::vector<uint64_t>& failed_peers,
    v1::ReportRoundRequest* report) {
  if (!resync_fetcher_) return false;
  const uint64_t self = transport_->self_id();
  std::string tried;
  for (const v1::PeerAssignment& member : assignment.ring_order()) {
    const uint64_t id = member.worker_id();
    if (id == self || std::find(failed_peers.begin(), failed_peers.end(),
                                id) != failed_peers.end())
      continue;
    absl::StatusOr<FetchedModel> model = resync_fetcher_(member);
    absl::Status status = model.status();
    if (status.ok() && model->round != assignment.round() + 1)
      status = absl::FailedPreconditionError(absl::StrCat(
          "its model is at next round ", model->round, ", not ",
          assignment.round() + 1, " (it did not complete the round)"));
    if (status.ok()) status = InstallFetchedModel(*model);
    if (status.ok()) {
      ++resyncs_;
      report->set_resynced_from(id);
      report->set_failure_reason(absl::StrCat(
          report->failure_reason(), "; re-synchronised from worker ", id));
      GASLOC_LOG(INFO) << "job " << options_.job_id << " round "
                       << assignment.round()
                       << ": re-synchronised with the model of worker " << id;
      return true;
    }
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", "worker ", id, ": ",
                    status.ToString());
  }
  GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                      << assignment.round()
                      << ": could not re-synchronise after the failed "
                         "all-reduce; keeping the round's start ("
                      << (tried.empty() ? "no member to fetch from" : tried)
                      << ")";
  return false;
}

absl::Status RoundRunner::SaveCheckpoint(const std::string& path) {
  CheckpointExtras outer;
  outer.buffers[kPrevIterate].assign(buffers_.y_prev.flat().begin(), buffers_.y_prev.flat().end());
  outer.buffers[kMomentum].assign(buffers_.momentum.flat().begin(), buffers_.momentum.flat().end());
  outer.values[kNextRound] = absl::StrCat(next_round_);
  outer.values[kJobId] = absl::StrCat(options_.job_id);
  if (buffers_.start_carried)
    outer.buffers[kRoundStart].assign(buffers_.theta_start.flat().begin(),
                                      buffers_.theta_start.flat().end());
  return trainer_->SaveCheckpoint(path, outer);
}

absl::Status RoundRunner::LoadCheckpoint(const std::string& path,
                                         std::optional<uint64_t> wanted) {
  // All or nothing: the outer state is checked before the trainer swaps
  // its state in (a refused checkpoint changes nothing).
  uint64_t next_round = 0;
  const auto check = [&](const CheckpointExtras& outer) -> absl::Status {
    uint64_t job_id = 0;
    auto value = [&](const char* key) {
      auto it = outer.values.find(key);
      return it == outer.values.end() ? std::string() : it->second;
    };
    if (!absl::SimpleAtoi(value(kJobId), &job_id) ||
        !absl::SimpleAtoi(value(kNextRound), &next_round))
      return absl::DataLossError(
          absl::StrCat("checkpoint ", path, " lacks the outer round state"));
    if (job_id != options_.job_id)
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", path, " is of job ", job_id,
                       ", not job ", options_.job_id));
    if (wanted.has_value() && next_round != *wanted)
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " holds the model for round ", next_round,
          ", not round ", *wanted, " (the checkpoint set's)"));
    for (auto [name, arena] : {std::pair<const char*, FloatArena*>{kPrevIterate, &buffers_.y_prev},
                               {kMomentum, &buffers_.momentum}}) {
      auto it = outer.buffers.find(name);
      const size_t size = it == outer.buffers.end() ? 0 : it->second.size();
      if (size != arena->size())
        return absl::DataLossError(absl::StrCat(
            "checkpoint ", path, ": ", name, " has ", size,
            " floats, the model needs ", arena->size()));
    }
    auto start = outer.buffers.find(kRoundStart);
    if (start != outer.buffers.end() &&
        start->second.size() != buffers_.theta_start.size())
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", path, ": ", kRoundStart, " has ",
          start->second.size(), " floats, the model needs ",
          buffers_.theta_start.size()));
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(CheckpointExtras outer, trainer_->LoadCheckpoint(path, check));
  for (auto [name, arena] : {std::pair<const char*, FloatArena*>{kPrevIterate, &buffers_.y_prev},
                             {kMomentum, &buffers_.momentum}}) {
    const std::vector<float>& buffer = outer.buffers[name];
    std::copy(buffer.begin(), buffer.end(), arena->data());
  }
  auto start = outer.buffers.find(kRoundStart);
  buffers_.start_carried = start != outer.buffers.end();
  if (buffers_.start_carried)
    std::copy(start->second.begin(), start->second.end(),
              buffers_.theta_start.data());
  next_round_ = next_round;
  return absl::OkStatus();
}

}  // namespace gasloc
