// Coordinator: rounds. Planning the next round (stop decision, epoch,
// schedule, budgets; the decisions themselves are round_planner.h,
// schedule.h and budget.h), handing out assignments (GetAssignment) and
// taking reports (ReportRound).
#include <algorithm>
#include <chrono>
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

const Coordinator::EpochRec* Coordinator::EpochOf(const JobRec& job,
                                                  uint64_t epoch) {
  auto it = job.epochs.find(epoch);
  return it == job.epochs.end() ? nullptr : &it->second;
}

Coordinator::RoundRec Coordinator::MakeRoundRec(const JobRec& job,
                                                uint64_t round, uint64_t epoch,
                                                int64_t deadline_unix_ms) {
  RoundRec rec;
  rec.round = round;
  rec.epoch = epoch;
  rec.deadline_unix_ms = deadline_unix_ms;
  const EpochRec* e = EpochOf(job, epoch);
  const uint32_t n = e == nullptr ? 0 : static_cast<uint32_t>(e->members.size());
  rec.schedule =
      PlanSchedule(RoundKey(job.stored.status.spec(), round, epoch), n);
  return rec;
}

void Coordinator::ForgetOldRounds(JobRec& job) const {
  if (job.next_round <= options_.rounds_kept || job.rounds.empty()) return;
  const uint64_t oldest = job.next_round - options_.rounds_kept;
  while (!job.rounds.empty() && job.rounds.begin()->first < oldest)
    job.rounds.erase(job.rounds.begin());
  if (job.rounds.empty()) return;
  const uint64_t oldest_epoch = job.rounds.begin()->second.epoch;
  while (!job.epochs.empty() && job.epochs.begin()->first < oldest_epoch)
    job.epochs.erase(job.epochs.begin());
}

Coordinator::RoundTally Coordinator::SettleRounds(JobRec& job, absl::Time now) {
  StoredJob& sj = job.stored;
  bool moved = false;
  // Rounds no longer kept that were never settled count as run (their
  // reports are unknown).
  const uint64_t oldest =
      job.rounds.empty() ? job.next_round : job.rounds.begin()->first;
  if (sj.rounds_decided < oldest) {
    sj.rounds_decided = oldest;
    moved = true;
  }
  RoundTally tally;
  bool in_order = true;
  for (auto it = job.rounds.lower_bound(sj.rounds_decided);
       it != job.rounds.end(); ++it) {
    RoundRec& rec = it->second;
    if (rec.outcome == RoundOutcome::kOpen) {
      const EpochRec* epoch = EpochOf(job, rec.epoch);
      const auto running = [&](uint64_t id) {
        auto m = job.members.find(id);
        return m != job.members.end() && !rec.failed.count(id) &&
               m->second.last_reported_round < static_cast<int64_t>(rec.round);
      };
      rec.outcome = DecideRoundOutcome(
          rec.completed,
          epoch == nullptr ? std::vector<uint64_t>{} : epoch->members, running,
          now >= absl::FromUnixMillis(rec.deadline_unix_ms));
    }
    // Settled in order only, so that a restart (which forgets the outcomes
    // above rounds_decided) counts no round twice.
    in_order = in_order && rec.outcome != RoundOutcome::kOpen &&
               it->first == sj.rounds_decided;
    if (in_order) {
      if (rec.outcome == RoundOutcome::kFailed) ++sj.rounds_failed;
      ++sj.rounds_decided;
      moved = true;
    } else if (rec.outcome == RoundOutcome::kFailed) {
      ++tally.failed;
    } else if (rec.outcome == RoundOutcome::kOpen) {
      ++tally.open;
    }
  }
  if (moved) SaveJob(job);
  tally.failed += sj.rounds_failed;
  return tally;
}

Coordinator::PlanResult Coordinator::PlanNextRound(JobRec& job,
                                                   absl::Time now) {
  // Planning time is a measurement, not a decision: the real monotonic
  // clock, not clock_.
  const auto planning_start = std::chrono::steady_clock::now();
  v1::JobStatus& st = job.stored.status;
  const uint64_t job_id = st.job_id();
  const uint64_t r = job.next_round;
  // A failed round is not progress: the rounds that count toward
  // max_rounds are those planned less those no member completed. A round
  // still open may yet fail: the job stops when it would stop even if every
  // open round failed, and waits for their reports when it would stop only
  // if they succeed.
  const RoundTally tally = SettleRounds(job, now);
  const uint64_t rounds_run = r - tally.failed;
  const absl::Time started = absl::FromUnixMillis(st.started_unix_ms());
  if (auto reason = StopReason(st.spec(), rounds_run - tally.open, st.tokens(),
                               started, now)) {
    job.stored.stop_round = static_cast<int64_t>(r);
    st.set_message(absl::StrCat("finishing: ", *reason));
    SaveJob(job);
    GASLOC_LOG(INFO) << "job " << job_id << " stops before round " << r << ": "
                     << *reason << " (" << tally.failed
                     << " failed round(s) not counted)";
    MaybeFinish(job, now);
    return PlanResult::kStopped;
  }
  if (StopReason(st.spec(), rounds_run, st.tokens(), started, now))
    return PlanResult::kWait;
  std::vector<uint64_t> ids;
  ids.reserve(job.members.size());
  for (const auto& [wid, m] : job.members) ids.push_back(wid);

  // Epoch: bumps when the members differ from the previous round's.
  const EpochRec* last =
      job.epochs.empty() ? nullptr : &job.epochs.rbegin()->second;
  const EpochDecision epoch = DecideEpoch(
      last == nullptr ? 0 : last->epoch,
      last == nullptr ? nullptr : &last->members, ids, r);
  if (epoch.bump) {
    job.epochs[epoch.epoch] = {epoch.epoch, r, ids};
    Write([&](Store& s) { return s.PutEpoch({job_id, epoch.epoch, r, ids}); });
    const std::string what = epoch.Reason();
    GASLOC_LOG(INFO) << "job " << job_id << " " << what;
    st.set_epoch(epoch.epoch);
    st.clear_worker_ids();
    for (uint64_t id : ids) st.add_worker_ids(id);
    AddEvent(job, v1::JOB_EVENT_KIND_MEMBERSHIP, what, now);
  }

  // The schedule first: each budget depends on this round's peers.
  RoundRec rec = MakeRoundRec(job, r, epoch.epoch, /*deadline_unix_ms=*/0);
  std::vector<double> links;
  links.reserve(ids.size());
  for (const auto& [wid, m] : job.members) links.push_back(m.bytes_per_second);
  std::vector<ExpectedExchange> expected =
      ExpectedExchanges(rec.schedule, ExchangeVolumeOf(st.spec()), links);
  // Budgets.
  std::vector<WorkerRates> rates;
  std::vector<WorkerRound> this_round;
  std::vector<uint32_t> old_steps;
  rates.reserve(ids.size());
  this_round.reserve(ids.size());
  old_steps.reserve(ids.size());
  for (const auto& [wid, m] : job.members) {
    ExpectedExchange e = this_round.size() < expected.size()
                             ? expected[this_round.size()]
                             : ExpectedExchange{};
    if (e.bound_index >= 0 && static_cast<size_t>(e.bound_index) < ids.size())
      e.bound_peer = ids[e.bound_index];
    rates.push_back(
        {.steps_per_second = m.steps_per_second,
         .bytes_per_second = m.bytes_per_second,
         .step_rate_spread = m.step_rate_variance < 0
                                 ? -1
                                 : std::sqrt(m.step_rate_variance)});
    this_round.push_back({.exchange = e, .previous_steps = m.local_steps});
    old_steps.push_back(m.local_steps);
  }
  BudgetPlan plan = PlanBudgets(
      rates, this_round,
      BudgetOptionsFor(st.spec(), static_cast<uint32_t>(ids.size())));
  const int64_t deadline = absl::ToUnixMillis(
      now + absl::Seconds(plan.target_round_seconds) +
      absl::Milliseconds(st.spec().exchange().deadline_ms()));
  rec.deadline_unix_ms = deadline;

  // Every change is counted; the first kLoggedBudgetChanges are logged with
  // their reason and the last max_budget_changes kept in the status, so a
  // 10,000-worker round (pairings change every round) formats no more.
  constexpr size_t kLoggedBudgetChanges = 32;
  const std::vector<BudgetDiff> diffs = DiffBudgets(old_steps, plan.budgets);
  const size_t kept_from =
      diffs.size() > static_cast<size_t>(options_.max_budget_changes)
          ? diffs.size() - static_cast<size_t>(options_.max_budget_changes)
          : 0;
  std::vector<std::string> changes;  // the event's first few
  for (size_t k = 0; k < diffs.size(); ++k) {
    const BudgetDiff& d = diffs[k];
    const Budget& b = plan.budgets[d.index];
    const uint64_t wid = ids[d.index];
    Metric([job_id, b](CoordinatorMetrics& m) { m.RecordBudgetChange(job_id, b); });
    if (changes.size() < 4)
      changes.push_back(absl::StrCat("worker ", wid, " H ", d.old_steps,
                                     " -> ", d.new_steps));
    if (k >= kLoggedBudgetChanges && k < kept_from) continue;
    const std::string reason = b.Reason();
    if (k >= kept_from) {
      v1::BudgetChange* c = st.add_budget_changes();
      c->set_worker_id(wid);
      c->set_round(r);
      c->set_old_local_steps(d.old_steps);
      c->set_new_local_steps(d.new_steps);
      c->set_reason(reason);
    }
    if (k < kLoggedBudgetChanges)
      GASLOC_LOG(INFO) << "job " << job_id << " round " << r << ": worker "
                       << wid << " H " << d.old_steps << " -> " << d.new_steps
                       << " (" << reason << ")";
  }
  if (diffs.size() > kLoggedBudgetChanges)
    GASLOC_LOG(INFO) << "job " << job_id << " round " << r << ": "
                     << diffs.size() - kLoggedBudgetChanges
                     << " more budget changes not logged one by one "
                        "(gaslocctl job budgets "
                     << job_id << " shows every member's H_i and reason)";
  size_t i = 0;
  for (auto& [wid, m] : job.members) {
    const Budget& b = plan.budgets[i++];
    bool dirty = false;
    if (m.first_round < 0) {
      m.first_round = static_cast<int64_t>(r);
      Contribute(job, m, +1);
      dirty = true;
    }
    if (m.local_steps != b.local_steps) {
      m.local_steps = b.local_steps;
      dirty = true;
    }
    if (dirty) SaveMember(m);
  }
  rec.budgets = std::move(plan.budgets);
  const int excess = st.budget_changes_size() - options_.max_budget_changes;
  if (excess > 0) st.mutable_budget_changes()->DeleteSubrange(0, excess);

  StoredRound sr;
  sr.job_id = job_id;
  sr.round = r;
  sr.epoch = epoch.epoch;
  sr.planned_unix_ms = absl::ToUnixMillis(now);
  sr.deadline_unix_ms = deadline;
  sr.budgets = std::move(rec.budgets);  // lent to the store, no copy
  Write([&](Store& s) { return s.PutRound(sr); });
  rec.budgets = std::move(sr.budgets);
  job.rounds[r] = std::move(rec);
  job.next_round = r + 1;
  st.set_round_planned(r);
  // Forget rounds (and epochs) older than the window kept; the database
  // every 16 rounds.
  if (r + 1 > options_.rounds_kept) {
    const uint64_t oldest = r + 1 - options_.rounds_kept;
    ForgetOldRounds(job);
    if (oldest % 16 == 0)
      Write([&](Store& s) { return s.PruneRounds(job_id, oldest); });
  }
  SaveJob(job);
  const double planning_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    planning_start)
          .count();
  Metric([job_id, planning_seconds](CoordinatorMetrics& m) {
    m.RecordRoundPlanned(job_id, planning_seconds);
  });
  if (!changes.empty()) {
    AddEvent(job, v1::JOB_EVENT_KIND_BUDGET,
             absl::StrCat("round ", r, ": ", diffs.size(),
                          " budget change(s): ", absl::StrJoin(changes, "; ")),
             now);
  }
  return PlanResult::kPlanned;
}

void Coordinator::AddWorkerBudgets(const JobRec& job,
                                   v1::JobStatus* status) const {
  if (job.rounds.empty()) return;
  const RoundRec& round = job.rounds.rbegin()->second;
  const EpochRec* epoch = EpochOf(job, round.epoch);
  if (epoch == nullptr) return;
  for (size_t i = 0; i < epoch->members.size() && i < round.budgets.size();
       ++i) {
    const uint64_t wid = epoch->members[i];
    const Budget& b = round.budgets[i];
    v1::WorkerBudget* w = status->add_worker_budgets();
    w->set_worker_id(wid);
    w->set_round(round.round);
    w->set_local_steps(b.local_steps);
    w->set_previous_local_steps(b.previous_steps);
    w->set_steps_per_second(b.steps_per_second);
    w->set_bytes_per_second(b.bytes_per_second);
    w->set_exchange_seconds(b.exchange_seconds);
    w->set_bound_peer(b.bound_peer);
    w->set_bound_bytes_per_second(b.bound_bytes_per_second);
    w->set_target_seconds(b.target_seconds);
    auto m = job.members.find(wid);
    if (m != job.members.end()) {
      w->set_wait_fraction(m->second.wait_fraction);
      // Not used by a uniform or unmeasured budget: the current estimate.
      if (b.basis != Budget::Basis::kAdaptive)
        w->set_steps_per_second(m->second.steps_per_second);
    }
    w->set_reason(b.Reason());
  }
}

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
  auto add_peer = [&](google::protobuf::RepeatedPtrField<v1::PeerAssignment>*
                          list,
                      uint64_t id, float weight) {
    v1::PeerAssignment* p = list->Add();
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
      add_peer(a.mutable_peers(), members[j],
               weights.PeerWeight(round.schedule, rank, j));
  if (weights.ring)
    for (uint64_t id : members)
      add_peer(a.mutable_ring_order(), id, weights.ring_weight);
  a.set_local_steps(round.budgets[rank].local_steps);
  a.set_budget_reason(round.budgets[rank].Reason());
  a.set_exchange_deadline_unix_ms(round.deadline_unix_ms);

  // A replica found apart from the majority after the previous round
  // fetches the model from a majority member of this round (the lowest id).
  if (round.round > 0) {
    auto prev = job.rounds.find(round.round - 1);
    if (prev != job.rounds.end() && prev->second.replica_decision &&
        prev->second.replica_decision->Apart(worker_id)) {
      for (uint64_t id : prev->second.replica_decision->majority) {
        if (id == worker_id || !job.members.count(id) ||
            !std::binary_search(members.begin(), members.end(), id))
          continue;
        v1::PeerAssignment* src = a.mutable_resync_source();
        src->set_worker_id(id);
        src->set_address(membership_.at(id).stored.info.address());
        src->set_weight(1.0f);
        break;
      }
    }
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
  if (prev != job.rounds.end()) {
    for (uint64_t id : EpochOf(job, prev->second.epoch)->members) {
      if (id == worker_id || !job.members.count(id)) continue;
      if (!std::binary_search(members.begin(), members.end(), id)) continue;
      v1::PeerAssignment* src = a.mutable_model_source();
      src->set_worker_id(id);
      src->set_address(membership_.at(id).stored.info.address());
      src->set_weight(1.0f);
      break;
    }
  }
  if (job.stored.status.has_checkpoint_set())
    *a.mutable_resume_from() = job.stored.status.checkpoint_set();
  return a;
}

absl::StatusOr<std::optional<v1::Assignment>> Coordinator::TryAssign(
    const v1::GetAssignmentRequest& request, absl::Time now) {
  ASSIGN_OR_RETURN(WorkerRec * w, membership_.Live(request.worker_id()));
  membership_.Renew(*w, now);
  const uint64_t worker_id = w->stored.worker_id;
  const uint64_t bound = w->stored.job_id;
  if (request.job_id() != 0 && request.job_id() != bound) {
    ASSIGN_OR_RETURN(JobRec * old, FindJob(request.job_id()));
    if (bound == 0) {
      const v1::JobStatus& st = old->stored.status;
      const std::vector<uint64_t>& dropped = old->stored.dropped;
      if (IsEnded(st.state()))
        return StopAssignment(*old, absl::StrCat("job ", st.job_id(), " ",
                                                 v1::JobState_Name(st.state()),
                                                 ": ", st.message()));
      if (std::binary_search(dropped.begin(), dropped.end(), worker_id))
        return StopAssignment(
            *old, absl::StrCat("worker ", worker_id, " was dropped from job ",
                               st.job_id(), ": its rounds failed ",
                               MaxConsecutiveRoundFailures(st.spec()),
                               " times in a row"));
      return StopAssignment(
          *old,
          absl::StrCat("worker ", worker_id, " is no longer a member of job ",
                       st.job_id(), " (", st.message(), ")"));
    }
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
    if (std::binary_search(e->members.begin(), e->members.end(), worker_id))
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
  if (PlanNextRound(job, now) == PlanResult::kWait) return std::nullopt;
  // Deciding to stop may have finished the job (and released the worker).
  if (job.stored.status.state() != v1::JOB_STATE_RUNNING)
    return StopAssignment(job, job.stored.status.message());
  // The job stops before the round just decided on: the worker is in none
  // of the rounds still to run (the loop above found none).
  if (job.stored.stop_round >= 0) return stop_now();
  return BuildAssignment(job, job.rounds.rbegin()->second, worker_id);
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
    // Wait for a change (a call that wrote or added an event), and at the
    // latest kLongPollRecheck to re-check leases (and `cancelled`). A
    // wake-up that is neither (a spurious one) runs no transaction.
    const uint64_t seen = changes_;
    const absl::Time recheck =
        std::min(give_up, clock_->Now() + kLongPollRecheck);
    while (changes_ == seen && clock_->Now() < recheck &&
           !(cancelled && cancelled()))
      clock_->WaitWithDeadline(&changed_, &mu_, recheck);
  }
  v1::Assignment none;
  none.set_kind(v1::ASSIGNMENT_KIND_NONE);
  none.set_job_id(request.job_id());
  return none;
}

absl::Status Coordinator::ReportRound(const v1::ReportRoundRequest& request) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  absl::MutexLock lock(&mu_);
  return Call([&](absl::Time now) {
    TickLocked(now);
    return ApplyReport(request, now);
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
  // s_i weighted by the round's length (link_model.h: short rounds run
  // faster than the sustained rate).
  if (!first_report) {
    m.step_rate_variance = UpdateStepRateVariance(
        m.step_rate_variance, m.steps_per_second, request.inner_steps(),
        request.compute_seconds(), st.spec().outer().local_steps(),
        options_.ema_weight);
    m.steps_per_second = UpdateStepRate(
        m.steps_per_second, request.inner_steps(), request.compute_seconds(),
        st.spec().outer().local_steps(), options_.ema_weight,
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
  const double round_seconds =
      request.compute_seconds() + request.exchange_seconds();
  m.wait_fraction =
      round_seconds > 0 ? request.wait_seconds() / round_seconds : 0;
  if (request.val_bpb() > 0) m.val_bpb = request.val_bpb();
  if (!IsGossipAlgorithm(st.spec().outer().algorithm()))
    NoteReplica(job, request.round(), request.worker_id(),
                {.checksum = request.replica_checksum(),
                 .behind = request.replica_behind()},
                now);
  m.train_loss = request.train_loss();
  Contribute(job, m, +1);
  st.set_tokens(SaturatingAdd(st.tokens(), request.tokens()));
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

void Coordinator::ApplyFailure(JobRec& job,
                               const v1::ReportRoundRequest& request,
                               absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const bool setup = request.outcome() == v1::ROUND_OUTCOME_SETUP_FAILED;
  const uint64_t wid = request.worker_id();
  // A retried report (same worker, round and outcome since the job last
  // started running: a resumed job runs its rounds again) is recorded once.
  for (const v1::WorkerFailure& f : st.failures())
    if (f.worker_id() == wid && f.round() == request.round() &&
        f.outcome() == request.outcome() &&
        f.unix_ms() >= st.started_unix_ms())
      return;
  const std::string error =
      request.error().empty() ? "no reason given" : request.error();
  v1::WorkerFailure* f = st.add_failures();
  f->set_worker_id(wid);
  f->set_round(request.round());
  f->set_outcome(request.outcome());
  f->set_error(error);
  f->set_unix_ms(absl::ToUnixMillis(now));
  const int excess = st.failures_size() - options_.max_failures;
  if (excess > 0) st.mutable_failures()->DeleteSubrange(0, excess);
  const char* kind = setup ? "setup" : "round";
  Metric([kind](CoordinatorMetrics& m) { m.RecordWorkerFailure(kind); });
  const std::string what =
      absl::StrCat("worker ", wid, " round ", request.round(),
                   setup ? ": job set-up failed: " : ": round failed: ", error);
  GASLOC_LOG(WARNING) << "job " << st.job_id() << " " << what;
  AddEvent(job, v1::JOB_EVENT_KIND_FAILURE, what, now);
  if (auto round = job.rounds.find(request.round()); round != job.rounds.end())
    round->second.failed.insert(wid);
  if (job.stored.first_failure.empty())
    job.stored.first_failure =
        absl::StrCat("worker ", wid, " round ", request.round(), ": ", error);
  StoredMember& member = job.members.at(wid);
  ++member.consecutive_failures;
  SaveMember(member);
  SaveJob(job);
  if (setup) {
    job.setup_failures[wid] = error;
  } else {
    job.setup_failures.erase(wid);
  }
  // A job none of whose members could set it up cannot train: it FAILS
  // with the reason rather than planning rounds nobody runs.
  bool every_setup_failed = true;
  for (const auto& [id, m] : job.members)
    every_setup_failed = every_setup_failed && job.setup_failures.count(id) > 0;
  if (every_setup_failed) {
    FailJob(job, "setup",
            absl::StrCat("every worker failed to set up the job (",
                         job.members.size(), " of ", job.members.size(),
                         "); worker ", job.setup_failures.begin()->first, ": ",
                         job.setup_failures.begin()->second),
            now);
    return;
  }
  const FailureDecision decision =
      DecideFailure(st.spec(), member.consecutive_failures, job.members.size());
  if (decision.drop) DropMember(job, wid, decision, error, now);
}

void Coordinator::DropMember(JobRec& job, uint64_t worker_id,
                             const FailureDecision& decision,
                             const std::string& error, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const std::string what =
      absl::StrCat("worker ", worker_id, " dropped from the job: it ",
                   decision.Reason(), "; last error: ", error);
  GASLOC_LOG(WARNING) << "job " << st.job_id() << " " << what;
  AddEvent(job, v1::JOB_EVENT_KIND_FAILURE, what, now);
  Metric([](CoordinatorMetrics& m) { m.RecordMemberDropped(); });
  std::vector<uint64_t>& dropped = job.stored.dropped;
  dropped.insert(std::upper_bound(dropped.begin(), dropped.end(), worker_id),
                 worker_id);
  ReleaseWorker(membership_.at(worker_id), now);
  SaveJob(job);
  if (!decision.fail_job || st.state() != v1::JOB_STATE_RUNNING) return;
  FailJob(job, "round_failures",
          absl::StrCat(decision.JobReason(), ": worker ", worker_id,
                       " dropped after it ", decision.Reason(),
                       "; first error: ", job.stored.first_failure),
          now);
}

}  // namespace gasloc::coordinator
