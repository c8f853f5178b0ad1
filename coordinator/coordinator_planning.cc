// Coordinator: planning. The next round's stop decision, epoch, schedule
// and budgets (the decisions themselves are round_planner.h, schedule.h
// and budget.h), the rounds' outcomes for the stop condition, the kept
// window of rounds, and the latest budgets shown in a job's status.
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "coordinator/coordinator.h"

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
  const uint64_t epoch = AdvanceEpoch(job, ids, now);

  // The schedule first: each budget depends on this round's peers.
  RoundRec rec = MakeRoundRec(job, r, epoch, /*deadline_unix_ms=*/0);
  BudgetPlan plan = PlanRoundBudgets(job, rec.schedule, ids);
  rec.deadline_unix_ms = absl::ToUnixMillis(
      now + absl::Seconds(plan.target_round_seconds) +
      absl::Milliseconds(st.spec().exchange().deadline_ms()));
  const std::string budget_event = RecordBudgetChanges(job, ids, plan);
  const double elapsed = absl::ToDoubleSeconds(now - started);
  rec.schedule_progress = PlanScheduleProgress(
      st.spec(),
      {.rounds_run = rounds_run,
       .tokens = st.tokens(),
       .seconds = elapsed,
       .round_tokens = PlannedRoundTokens(st.spec(), plan.budgets),
       .round_seconds =
           ExpectedRoundSeconds(plan.target_round_seconds, r, elapsed)});
  rec.budgets = std::move(plan.budgets);
  StoreRound(job, std::move(rec), now);
  const double planning_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    planning_start)
          .count();
  Metric([job_id, planning_seconds](CoordinatorMetrics& m) {
    m.RecordRoundPlanned(job_id, planning_seconds);
  });
  if (!budget_event.empty())
    AddEvent(job, v1::JOB_EVENT_KIND_BUDGET, budget_event, now);
  return PlanResult::kPlanned;
}

uint64_t Coordinator::AdvanceEpoch(JobRec& job,
                                   const std::vector<uint64_t>& ids,
                                   absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const uint64_t job_id = st.job_id();
  const uint64_t r = job.next_round;
  // Bumps when the members differ from the previous round's.
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
  return epoch.epoch;
}

BudgetPlan Coordinator::PlanRoundBudgets(const JobRec& job,
                                         const RoundSchedule& schedule,
                                         const std::vector<uint64_t>& ids) {
  const v1::JobSpec& spec = job.stored.status.spec();
  std::vector<double> links;
  links.reserve(ids.size());
  for (const auto& [wid, m] : job.members) links.push_back(m.bytes_per_second);
  std::vector<ExpectedExchange> expected =
      ExpectedExchanges(schedule, ExchangeVolumeOf(spec), links);
  std::vector<WorkerRates> rates;
  std::vector<WorkerRound> this_round;
  rates.reserve(ids.size());
  this_round.reserve(ids.size());
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
                                 : std::sqrt(m.step_rate_variance),
         .estimate_share = m.step_rate_estimate_share});
    this_round.push_back({.exchange = e, .previous_steps = m.local_steps});
  }
  return PlanBudgets(rates, this_round,
                     BudgetOptionsFor(spec, static_cast<uint32_t>(ids.size())));
}

std::string Coordinator::RecordBudgetChanges(JobRec& job,
                                             const std::vector<uint64_t>& ids,
                                             const BudgetPlan& plan) {
  v1::JobStatus& st = job.stored.status;
  const uint64_t job_id = st.job_id();
  const uint64_t r = job.next_round;
  std::vector<uint32_t> old_steps;
  old_steps.reserve(ids.size());
  for (const auto& [wid, m] : job.members) old_steps.push_back(m.local_steps);
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
  const int excess = st.budget_changes_size() - options_.max_budget_changes;
  if (excess > 0) st.mutable_budget_changes()->DeleteSubrange(0, excess);
  if (changes.empty()) return "";
  return absl::StrCat("round ", r, ": ", diffs.size(),
                      " budget change(s): ", absl::StrJoin(changes, "; "));
}

void Coordinator::StoreRound(JobRec& job, RoundRec rec, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const uint64_t job_id = st.job_id();
  const uint64_t r = rec.round;
  // The members' new budgets (and a joiner's first round).
  size_t i = 0;
  for (auto& [wid, m] : job.members) {
    const Budget& b = rec.budgets[i++];
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

  StoredRound sr;
  sr.job_id = job_id;
  sr.round = r;
  sr.epoch = rec.epoch;
  sr.planned_unix_ms = absl::ToUnixMillis(now);
  sr.deadline_unix_ms = rec.deadline_unix_ms;
  if (rec.schedule_progress) {
    sr.schedule_begin = rec.schedule_progress->begin;
    sr.schedule_end = rec.schedule_progress->end;
  }
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

}  // namespace gasloc::coordinator
