// Coordinator: reports. ReportRound: a completed round's progress, the
// member's s_i / b_i estimates, its replica check and checkpoint; a failed
// one goes to coordinator_failures.cc.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/link_bandwidth.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/request_bounds.h"

namespace gasloc::coordinator {
namespace {

// Logs the peers a completed round lost or refused.
void LogPeerTrouble(const v1::JobStatus& st,
                    const v1::ReportRoundRequest& request) {
  if (!request.failed_peers().empty())
    GASLOC_LOG(WARNING) << "job " << st.job_id() << " round "
                        << request.round() << ": worker "
                        << request.worker_id() << " lost peers "
                        << absl::StrJoin(request.failed_peers(), ",") << " ("
                        << request.failure_reason() << ")";
  if (!request.refused_peers().empty())
    GASLOC_LOG(WARNING) << "job " << st.job_id() << " round "
                        << request.round() << ": worker "
                        << request.worker_id()
                        << " refused the model of worker(s) "
                        << absl::StrJoin(request.refused_peers(), ",")
                        << " (poisoning guard: too far from its own)";
}

// A round's inner steps and compute seconds less those taken beside the
// exchange (outer.overlap_exchange): those share the CPU with the
// exchange's thread and run slower than the sustained rate the planner
// needs. No un-overlapped steps: {0, 0}, which leaves s_i as it is.
struct UnoverlappedSteps {
  double steps = 0;
  double seconds = 0;
};
UnoverlappedSteps UnoverlappedStepsOf(const v1::ReportRoundRequest& request) {
  if (request.overlap_steps() >= request.inner_steps()) return {};
  return {.steps = static_cast<double>(request.inner_steps() -
                                       request.overlap_steps()),
          .seconds = request.compute_seconds() -
                     request.overlap_compute_seconds()};
}

// The round's wall seconds, the wait's denominator: round_seconds when the
// worker measured it (with overlap, compute_seconds includes steps taken
// during the exchange, so compute + exchange counts them twice), else
// compute + exchange (an older worker, which never overlaps).
double RoundWallSeconds(const v1::ReportRoundRequest& request) {
  if (request.round_seconds() > 0) return request.round_seconds();
  return request.compute_seconds() + request.exchange_seconds();
}

}  // namespace

absl::Status Coordinator::ReportRound(const v1::ReportRoundRequest& request) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  return Durably([&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    return Call([&](absl::Time now) {
      TickLocked(now);
      return ApplyReport(request, now);
    });
  });
}

absl::Status Coordinator::ApplyReport(const v1::ReportRoundRequest& request,
                                      absl::Time now) {
  ASSIGN_OR_RETURN(WorkerRec * w, membership_.Live(request.worker_id()));
  ASSIGN_OR_RETURN(JobRec * found, FindJob(request.job_id()));
  JobRec& job = *found;
  membership_.Renew(*w, now);
  v1::JobStatus& st = job.stored.status;
  // Late reports for a job that has ended change nothing.
  if (st.state() != v1::JOB_STATE_RUNNING) return absl::OkStatus();
  auto mit = job.members.find(w->stored.worker_id);
  if (mit == job.members.end())
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id(),
                     " is not a member of job ", request.job_id()));
  if (request.round() >= job.next_round)
    return absl::InvalidArgumentError(absl::StrCat(
        "round ", request.round(), " of job ", request.job_id(),
        " was not planned (rounds planned: ", job.next_round, ")"));
  if (request.outcome() == v1::ROUND_OUTCOME_SETUP_FAILED ||
      request.outcome() == v1::ROUND_OUTCOME_FAILED) {
    // A failed round left the model at the round's start (behind); a
    // failed set-up holds no model of the round.
    if (!IsGossipAlgorithm(st.spec().outer().algorithm()))
      NoteReplica(job, request.round(), request.worker_id(),
                  {.behind = request.outcome() == v1::ROUND_OUTCOME_FAILED,
                   .failed = request.outcome() ==
                             v1::ROUND_OUTCOME_SETUP_FAILED},
                  now);
    ApplyFailure(job, request, now);
    TickLocked(now);
    return absl::OkStatus();
  }
  job.setup_failures.erase(request.worker_id());
  StoredMember& m = mit->second;
  if (static_cast<int64_t>(request.round()) <= m.last_reported_round)
    return absl::OkStatus();  // a duplicate
  // Progress: the round counts, the member's failures in a row end.
  if (auto round = job.rounds.find(request.round()); round != job.rounds.end())
    round->second.completed = true;
  m.consecutive_failures = 0;
  job.stored.first_failure.clear();
  Contribute(job, m, -1);
  // A member's first round in the job carries its start-up (oneDNN
  // primitives, first-touch page faults: 74 steps/s against 84-105 later
  // in the homogeneous sweep): s_i starts from its second.
  const bool first_report = m.last_reported_round < 0;
  m.last_reported_round = static_cast<int64_t>(request.round());
  UpdateEstimates(job, m, request, first_report);
  if (request.val_bpb() > 0) m.val_bpb = request.val_bpb();
  if (!IsGossipAlgorithm(st.spec().outer().algorithm()))
    NoteReplica(job, request.round(), request.worker_id(),
                {.checksum = request.replica_checksum(),
                 .behind = request.replica_behind()},
                now);
  m.train_loss = request.train_loss();
  Contribute(job, m, +1);
  st.set_tokens(SaturatingAdd(st.tokens(), request.tokens()));
  LogPeerTrouble(st, request);
  SaveMember(m);
  UpdateProgress(job, now);
  RecordCheckpoint(job, request, now);
  if (!std::isfinite(request.train_loss())) {
    FailJob(job, "non_finite_loss",
            absl::StrCat("worker ", request.worker_id(),
                         " reported a non-finite training loss (",
                         request.train_loss(), ") in round ", request.round()),
            now);
  } else {
    MaybeFinish(job, now);
  }
  SaveJob(job);
  TickLocked(now);
  return absl::OkStatus();
}

void Coordinator::UpdateEstimates(JobRec& job, StoredMember& m,
                                  const v1::ReportRoundRequest& request,
                                  bool first_report) {
  const v1::JobSpec& spec = job.stored.status.spec();
  // s_i weighted by the round's length (link_model.h: short rounds run
  // faster than the sustained rate), from the un-overlapped steps only
  // (algorithms.md section 5, "What the planner measures under overlap").
  if (!first_report) {
    const UnoverlappedSteps own = UnoverlappedStepsOf(request);
    m.step_rate_variance = UpdateStepRateVariance(
        m.step_rate_variance, m.steps_per_second, own.steps, own.seconds,
        spec.outer().local_steps(), options_.ema_weight);
    m.step_rate_estimate_share = UpdateStepRateEstimateShare(
        m.step_rate_estimate_share, m.steps_per_second, own.steps,
        own.seconds, spec.outer().local_steps(), options_.ema_weight);
    m.steps_per_second =
        UpdateStepRate(m.steps_per_second, own.steps, own.seconds,
                       spec.outer().local_steps(), options_.ema_weight,
                       kMaxEstimateFactor);
  }
  // b_i from wire time only (the wait for a partner is not the link's):
  // per-peer samples when the worker sent them, else the whole exchange's
  // wire time; a report without wire time leaves b_i as it is.
  std::vector<LinkObservation> samples;
  // Concurrent receives share the link: a peer's sample is scaled by their
  // number (link_model.h; a ring all-reduce reports one sample).
  const double sharing = static_cast<double>(request.link_samples_size());
  for (const v1::LinkSample& sample : request.link_samples()) {
    const double rate =
        sharing * LinkBytesPerSecond(0, sample.bytes(), sample.wire_seconds());
    auto peer = job.members.find(sample.peer_id());
    samples.push_back(
        {.bytes_per_second = rate,
         .peer_estimate =
             peer == job.members.end() ? 0 : peer->second.bytes_per_second});
  }
  if (samples.empty())
    samples.push_back({.bytes_per_second = LinkBytesPerSecond(
                           request.bytes_sent(), request.bytes_received(),
                           request.wire_seconds())});
  m.bytes_per_second = UpdateLinkEstimate(m.bytes_per_second, samples,
                                          options_.ema_weight,
                                          kMaxEstimateFactor);
  RaisePeerLinks(job, request);
  const double round_seconds = RoundWallSeconds(request);
  m.wait_fraction =
      round_seconds > 0 ? request.wait_seconds() / round_seconds : 0;
}

void Coordinator::RaisePeerLinks(JobRec& job,
                                 const v1::ReportRoundRequest& request) {
  // A sample is min(b_i, b_j): a lower bound on the sender's link too. Of
  // a pair only the end that reached the exchange first measures (the
  // other's bytes were buffered before it registered), so without this
  // the later end's estimate would learn nothing from the edge.
  for (const v1::LinkSample& sample : request.link_samples()) {
    if (sample.peer_id() == request.worker_id()) continue;
    auto peer = job.members.find(sample.peer_id());
    if (peer == job.members.end()) continue;
    const double rate =
        LinkBytesPerSecond(0, sample.bytes(), sample.wire_seconds());
    if (!(rate > peer->second.bytes_per_second)) continue;
    peer->second.bytes_per_second = rate;
    SaveMember(peer->second);
  }
}

void Coordinator::NoteReplica(JobRec& job, uint64_t round,
                              uint64_t worker_id, ReplicaReport report,
                              absl::Time now) {
  auto it = job.rounds.find(round);
  if (it == job.rounds.end()) return;  // no longer kept
  RoundRec& rec = it->second;
  if (rec.replica_decision) return;  // decided (a late or retried report)
  rec.replicas[worker_id] = report;
  MaybeDecideReplicas(job, rec, now);
}

bool Coordinator::MaybeDecideReplicas(JobRec& job, RoundRec& rec,
                                      absl::Time now) {
  if (rec.replica_decision) return true;
  const EpochRec* epoch = EpochOf(job, rec.epoch);
  if (epoch == nullptr) return true;  // nothing to wait for
  // Waited for: members still in the job that have not reported the round,
  // until the round's deadline (a report lost with a coordinator restart,
  // or a member stuck, must not hold the job; a member that reported
  // before a restart counts, its checksum unknown).
  if (now < absl::FromUnixMillis(rec.deadline_unix_ms)) {
    for (uint64_t id : epoch->members) {
      if (rec.replicas.count(id)) continue;
      auto m = job.members.find(id);
      if (m == job.members.end()) continue;  // left: not waited for
      if (m->second.last_reported_round >= static_cast<int64_t>(rec.round))
        continue;
      return false;
    }
  }
  rec.replica_decision = DecideReplicas(rec.round, rec.replicas);
  const uint64_t round = rec.round;
  const ReplicaDecision& d = *rec.replica_decision;
  if (!d.Diverged()) return true;
  const uint64_t job_id = job.stored.status.job_id();
  const uint64_t by_checksum = d.apart_checksum.size();
  const uint64_t behind = d.apart_behind.size();
  Metric([by_checksum, behind](CoordinatorMetrics& m) {
    if (by_checksum > 0) m.RecordReplicaDivergence("checksum", by_checksum);
    if (behind > 0) m.RecordReplicaDivergence("behind", behind);
  });
  const std::string what = absl::StrCat(
      "replicas diverged in ", d.Reason(),
      "; they re-synchronise from a majority member before round ", round + 1);
  GASLOC_LOG(WARNING) << "job " << job_id << " " << what;
  AddEvent(job, v1::JOB_EVENT_KIND_FAILURE, what, now);
  return true;
}

}  // namespace gasloc::coordinator
