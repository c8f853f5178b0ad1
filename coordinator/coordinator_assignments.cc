// Coordinator: assignments. GetAssignment's long poll, which round (or
// stop) a worker gets next, and the assignment itself: rank, peers, ring,
// budget and the sources a re-syncing or joining member fetches from.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"

namespace gasloc::coordinator {

v1::Assignment Coordinator::StopAssignment(const JobRec& job,
                                           const std::string& message) const {
  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_STOP);
  a.set_job_id(job.stored.status.job_id());
  a.set_message(message);
  return a;
}

v1::Assignment Coordinator::BuildAssignment(const JobRec& job,
                                            const RoundRec& round,
                                            uint64_t worker_id) {
  const v1::JobSpec& spec = job.stored.status.spec();
  const EpochRec* epoch = EpochOf(job, round.epoch);
  const std::vector<uint64_t>& members = epoch->members;
  const auto pos = std::lower_bound(members.begin(), members.end(), worker_id);
  const auto rank = static_cast<uint32_t>(pos - members.begin());
  const auto n = static_cast<uint32_t>(members.size());
  auto set_peer = [&](v1::PeerAssignment* p, uint64_t id, float weight) {
    p->set_worker_id(id);
    p->set_address(membership_.at(id).stored.info.address());
    p->set_weight(weight);
  };

  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_ROUND);
  a.set_job_id(job.stored.status.job_id());
  *a.mutable_spec() = spec;
  a.set_round(round.round);
  a.set_epoch(round.epoch);
  a.set_rank(rank);
  a.set_num_workers(n);
  const EdgeWeights weights = RoundWeights(spec, n);
  a.set_alpha(weights.alpha);
  if (weights.gossip)
    for (uint32_t j : round.schedule.PeersOf(rank))
      set_peer(a.add_peers(), members[j],
               weights.PeerWeight(round.schedule, rank, j));
  if (weights.ring)
    for (uint64_t id : members)
      set_peer(a.add_ring_order(), id, weights.ring_weight);
  a.set_local_steps(round.budgets[rank].local_steps);
  a.set_budget_reason(round.budgets[rank].Reason());
  a.set_exchange_deadline_unix_ms(round.deadline_unix_ms);
  if (round.schedule_progress) {
    a.set_has_schedule(true);
    a.set_schedule_progress_begin(round.schedule_progress->begin);
    a.set_schedule_progress_end(round.schedule_progress->end);
  }

  // A replica found apart from the majority after the previous round
  // fetches the model from a majority member of this round (the lowest id).
  if (round.round > 0) {
    auto prev = job.rounds.find(round.round - 1);
    if (prev != job.rounds.end() && prev->second.replica_decision &&
        prev->second.replica_decision->Apart(worker_id))
      if (auto id = FirstSource(job, prev->second.replica_decision->majority,
                                members, worker_id))
        set_peer(a.mutable_resync_source(), *id, 1.0f);
  }

  // A worker new to the job fetches the model from a member that was in the
  // previous round and is still in the job (the lowest id); with no such
  // member (a whole-cluster restart, a resumed job) or when the fetch fails
  // (the source died too), it loads its checkpoint of the job's latest
  // complete set.
  auto m = job.members.find(worker_id);
  if (m == job.members.end() ||
      m->second.first_round != static_cast<int64_t>(round.round) ||
      round.round == 0)
    return a;
  auto prev = job.rounds.find(round.round - 1);
  if (prev != job.rounds.end())
    if (auto id = FirstSource(job, EpochOf(job, prev->second.epoch)->members,
                              members, worker_id))
      set_peer(a.mutable_model_source(), *id, 1.0f);
  if (job.stored.status.has_checkpoint_set())
    *a.mutable_resume_from() = job.stored.status.checkpoint_set();
  return a;
}

std::optional<uint64_t> Coordinator::FirstSource(
    const JobRec& job, const std::vector<uint64_t>& candidates,
    const std::vector<uint64_t>& members, uint64_t worker_id) {
  for (uint64_t id : candidates) {
    if (id == worker_id || !job.members.count(id)) continue;
    if (!std::binary_search(members.begin(), members.end(), id)) continue;
    return id;
  }
  return std::nullopt;
}

v1::Assignment Coordinator::LeftJobAssignment(const JobRec& old,
                                              uint64_t worker_id) const {
  const v1::JobStatus& st = old.stored.status;
  const std::vector<uint64_t>& dropped = old.stored.dropped;
  if (IsEnded(st.state()))
    return StopAssignment(old, absl::StrCat("job ", st.job_id(), " ",
                                            v1::JobState_Name(st.state()),
                                            ": ", st.message()));
  if (std::binary_search(dropped.begin(), dropped.end(), worker_id))
    return StopAssignment(
        old, absl::StrCat("worker ", worker_id, " was dropped from job ",
                          st.job_id(), ": its rounds failed ",
                          MaxConsecutiveRoundFailures(st.spec()),
                          " times in a row"));
  return StopAssignment(
      old, absl::StrCat("worker ", worker_id, " is no longer a member of job ",
                        st.job_id(), " (", st.message(), ")"));
}

absl::StatusOr<std::optional<v1::Assignment>> Coordinator::TryAssign(
    const v1::GetAssignmentRequest& request, absl::Time now) {
  ASSIGN_OR_RETURN(WorkerRec * w, membership_.Live(request.worker_id()));
  membership_.Renew(*w, now);
  const uint64_t worker_id = w->stored.worker_id;
  const uint64_t bound = w->stored.job_id;
  if (request.job_id() != 0 && request.job_id() != bound) {
    ASSIGN_OR_RETURN(JobRec * old, FindJob(request.job_id()));
    if (bound == 0) return LeftJobAssignment(*old, worker_id);
  }
  if (bound == 0) return std::nullopt;
  JobRec& job = jobs_.at(bound);
  const int64_t after =
      request.job_id() == bound ? request.after_round() : int64_t{-1};
  const uint64_t next = static_cast<uint64_t>(after + 1);
  StoredMember& member = job.members.at(worker_id);

  auto stop_now = [&]() -> v1::Assignment {
    member.got_stop = true;
    v1::Assignment a = StopAssignment(job, job.stored.status.message());
    ReleaseWorker(*w, now);
    return a;
  };
  if (job.stored.stop_round >= 0 &&
      static_cast<int64_t>(next) >= job.stored.stop_round)
    return stop_now();
  if (next > job.next_round)
    return absl::InvalidArgumentError(absl::StrCat(
        "after_round ", after, " is ahead of job ", bound,
        " (rounds planned: ", job.next_round, ")"));

  // The member has finished round `after` (completed or failed): what the
  // round lead bound waits on.
  member.last_finished_round = std::max(member.last_finished_round, after);

  // All-reduce replicas: the next round waits until every member reported
  // the previous one, so the replica check has decided who re-syncs
  // before anyone gets the round (its ring needs every member anyway; a
  // member that dies stops being waited for when its lease expires).
  if (next > 0 && !IsGossipAlgorithm(job.stored.status.spec().outer().algorithm())) {
    auto prev = job.rounds.find(next - 1);
    if (prev != job.rounds.end() && !MaybeDecideReplicas(job, prev->second, now))
      return std::nullopt;
  }
  // The first planned round >= next that includes the worker.
  for (auto it = job.rounds.lower_bound(next); it != job.rounds.end(); ++it) {
    const EpochRec* e = EpochOf(job, it->second.epoch);
    if (!std::binary_search(e->members.begin(), e->members.end(), worker_id))
      continue;
    if (HeldByRoundLead(job, member, it->first)) return std::nullopt;
    return BuildAssignment(job, it->second, worker_id);
  }
  // None of the planned rounds has the worker, and no round will be planned
  // any more (the job is finishing): a joiner whose first round would have
  // come after the last one stops here.
  if (job.stored.stop_round >= 0) return stop_now();
  if (next < job.next_round && !job.rounds.empty() &&
      next < job.rounds.begin()->first && member.first_round >= 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "round ", next, " of job ", bound,
        " is no longer kept; ask for a later round"));
  // Nothing planned for the worker yet: plan the next round now, or wait
  // for the boundary (round_planner.h DecidePlanNext).
  const std::vector<uint64_t>* latest =
      job.rounds.empty()
          ? nullptr
          : &EpochOf(job, job.rounds.rbegin()->second.epoch)->members;
  const PlanDecision decision = DecidePlanNext(
      latest, worker_id, [&](uint64_t id) { return job.members.count(id) > 0; });
  if (!decision.plan) return std::nullopt;
  // Held back, the round is planned later, from the reports then in.
  if (HeldByRoundLead(job, member, job.next_round)) return std::nullopt;
  if (PlanNextRound(job, now) == PlanResult::kWait) return std::nullopt;
  // Deciding to stop may have finished the job (and released the worker).
  if (job.stored.status.state() != v1::JOB_STATE_RUNNING)
    return StopAssignment(job, job.stored.status.message());
  // The job stops before the round just decided on: the worker is in none
  // of the rounds still to run (the loop above found none).
  if (job.stored.stop_round >= 0) return stop_now();
  return BuildAssignment(job, job.rounds.rbegin()->second, worker_id);
}

bool Coordinator::HeldByRoundLead(const JobRec& job, StoredMember& member,
                                  uint64_t round) {
  const v1::OuterSpec& outer = job.stored.status.spec().outer();
  if (!outer.has_max_round_lead()) return false;
  std::vector<MemberProgress> progress;
  progress.reserve(job.members.size());
  for (const auto& [id, m] : job.members) {
    // Not in a round yet, or done with the job: nobody waits for it.
    if (m.first_round < 0 || m.got_stop) continue;
    progress.push_back(
        {id, std::max({m.last_reported_round, m.last_finished_round,
                       m.first_round - 1})});
  }
  const LeadDecision decision =
      DecideRoundLead(round, outer.max_round_lead(), progress);
  if (!decision.hold) return false;
  if (member.lead_held_round != static_cast<int64_t>(round)) {
    member.lead_held_round = static_cast<int64_t>(round);
    GASLOC_LOG(INFO) << "job " << job.stored.status.job_id() << " worker "
                     << member.worker_id << " waits at the round boundary: "
                     << decision.Reason();
    Metric([](CoordinatorMetrics& m) { m.RecordRoundLeadHold(); });
  }
  return true;
}

bool Coordinator::IdleNow(uint64_t worker_id) {
  const WorkerRec* w = membership_.Find(worker_id);
  return w != nullptr && w->stored.state == v1::WORKER_STATE_ALIVE &&
         w->stored.job_id == 0;
}

void Coordinator::WakePollers() {
  for (PollWaiter* waiter : pollers_) {
    if (waiter->woken || (waiter->idle && IdleNow(waiter->worker_id)))
      continue;
    waiter->woken = true;
    waiter->wake.Signal();
  }
}

absl::StatusOr<v1::Assignment> Coordinator::GetAssignment(
    const v1::GetAssignmentRequest& request,
    const std::function<bool()>& cancelled) {
  if (request.wait_ms() > 60000)
    return absl::InvalidArgumentError(absl::StrCat(
        "wait_ms must be in [0, 60000], got ", request.wait_ms()));
  if (request.after_round() < -1)
    return absl::InvalidArgumentError(absl::StrCat(
        "after_round must be >= -1, got ", request.after_round()));
  const absl::Duration wait = request.wait_ms() == 0
                                  ? options_.default_wait
                                  : absl::Milliseconds(request.wait_ms());
  // Every wait is on the clock (tests drive it with a FakeClock).
  return Durably([&]() -> absl::StatusOr<v1::Assignment> {
    absl::MutexLock lock(&mu_);
    const absl::Time give_up = clock_->Now() + wait;
    while (true) {
      ASSIGN_OR_RETURN(std::optional<v1::Assignment> result,
                       Call([&](absl::Time now) {
                         TickLocked(now);
                         return TryAssign(request, now);
                       }));
      if (result.has_value()) return std::move(*result);
      if (clock_->Now() >= give_up || (cancelled && cancelled())) break;
      // Wait for a change (a call that wrote or added an event; for an
      // idle worker only its binding to a job, WakePollers), and at the
      // latest kLongPollRecheck to re-check leases (and `cancelled`). A
      // wake-up that is neither (a spurious one) runs no transaction.
      PollWaiter waiter;
      waiter.worker_id = request.worker_id();
      waiter.idle = IdleNow(request.worker_id());
      pollers_.insert(&waiter);
      const absl::Time recheck =
          std::min(give_up, clock_->Now() + kLongPollRecheck);
      while (!waiter.woken && clock_->Now() < recheck &&
             !(cancelled && cancelled()))
        clock_->WaitWithDeadline(&waiter.wake, &mu_, recheck);
      pollers_.erase(&waiter);
    }
    v1::Assignment none;
    none.set_kind(v1::ASSIGNMENT_KIND_NONE);
    none.set_job_id(request.job_id());
    return none;
  });
}

}  // namespace gasloc::coordinator
