// The round planner's decisions, as pure functions of (state, options) that
// return the decision with its reason: whether a job has ended, whether it
// stops before a round, whether a planned round failed (it then does not
// count toward the stop), whether a failing member is dropped and the job
// fails with it, the epoch of the next round (who joined and who left), whether
// a worker's request plans the next round, the budget options of a round and
// which budgets changed. The Coordinator gathers the state, calls these,
// applies the result and persists it; the communication graph and its edge
// weights come from schedule.h, the budgets themselves from budget.h.
//
// Reasons are built only when asked for (Reason()), so planning a round of
// 10,000 workers formats none that nobody reads.
//
// Thread safety: pure functions; safe from any thread.
#ifndef GASLOC_COORDINATOR_ROUND_PLANNER_H_
#define GASLOC_COORDINATOR_ROUND_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "coordinator/budget.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc::coordinator {

// "1,2,3", or the first eight and the count ("1,...,8,... (12)").
std::string FormatIdList(const std::vector<uint64_t>& ids);

// Whether a job in `state` has ended (FINISHED, FAILED or STOPPED): the one
// definition, for the coordinator, its service and the tests.
bool IsEnded(v1::JobState state);

// Why a job must stop before planning its next round, or nullopt to go on:
// `rounds_run` (the rounds planned less those that failed: a failed round
// is not progress) reached max_rounds, `tokens` max_tokens, or
// max_wall_seconds passed since `started`.
std::optional<std::string> StopReason(const v1::JobSpec& spec,
                                      uint64_t rounds_run, uint64_t tokens,
                                      absl::Time started, absl::Time now);

// What a planned round was, for the stop condition: kSucceeded once a
// member completed it; kFailed when no member completed it and none is
// still `running` it (every member of its epoch still in the job reported
// it failed), or when its deadline passed with none completed (a member
// stuck past the deadline must not hold the job's stop); else kOpen.
enum class RoundOutcome { kOpen, kSucceeded, kFailed };
RoundOutcome DecideRoundOutcome(bool completed,
                                const std::vector<uint64_t>& epoch_members,
                                absl::FunctionRef<bool(uint64_t)> running,
                                bool past_deadline);

// After a member's failed round (its `consecutive` failures in a row, the
// job's `members` before any drop): it is dropped when it has failed
// spec.max_consecutive_round_failures rounds in a row, and the job fails
// when the drop leaves it below spec.min_workers.
struct FailureDecision {
  bool drop = false;
  bool fail_job = false;
  uint32_t consecutive = 0;
  uint32_t limit = 0;       // max_consecutive_round_failures
  size_t members_left = 0;  // after the drop
  uint32_t min_workers = 0;
  // "failed 3 round(s) in a row (max_consecutive_round_failures=3)".
  std::string Reason() const;
  // For fail_job: "every worker was dropped" or "1 worker(s) left, fewer
  // than min_workers=2".
  std::string JobReason() const;
};
FailureDecision DecideFailure(const v1::JobSpec& spec, uint32_t consecutive,
                              size_t members);
// spec.max_consecutive_round_failures, or its default when unset (a job
// stored before the field existed).
uint32_t MaxConsecutiveRoundFailures(const v1::JobSpec& spec);

// Where a round sits on the job's learning-rate horizon (job.proto
// ScheduleHorizon), as fractions of it in [0, 1] at the round's start and
// at its planned end (Assignment.schedule_progress_begin / _end).
struct ScheduleProgress {
  double begin = 0;
  double end = 0;
};

// The job's progress when a round is planned, and what the round is
// expected to add to it.
struct JobProgress {
  uint64_t rounds_run = 0;   // rounds counting toward max_rounds, before it
  uint64_t tokens = 0;       // the job's tokens so far (status.tokens)
  double seconds = 0;        // since the job started running
  double round_tokens = 0;   // the round's planned steps x tokens a step
  double round_seconds = 0;  // the round's planned length
};

// The round's place on the horizon of `spec` (ScheduleHorizonOf), from the
// job's progress `at` its planning: begin = the done fraction of the
// horizon's limit (rounds_run / max_rounds, tokens / max_tokens, seconds /
// max_wall_seconds), end = that plus what the round adds (1 round,
// round_tokens, round_seconds); STOP takes the largest begin and the
// largest end over the limits set; both clamped to [0, 1]. nullopt for
// ROUNDS: the workers follow rounds x H, as before the horizon existed.
std::optional<ScheduleProgress> PlanScheduleProgress(const v1::JobSpec& spec,
                                                     const JobProgress& at);

// Tokens a round of `budgets` consumes: the planned steps times the
// tokens of one step (batch x context, as the trainer counts them).
double PlannedRoundTokens(const v1::JobSpec& spec,
                          const std::vector<Budget>& budgets);

// The planned length of a round: the budget plan's target round time
// when it has one, else the mean time a round so far (`elapsed` seconds
// over `rounds_planned`), else 0.
double ExpectedRoundSeconds(double target_round_seconds,
                            uint64_t rounds_planned, double elapsed);

// Seconds until the first stop condition is reached at the rate observed
// since `started`; < 0 = unknown.
double EstimateEtaSeconds(const v1::JobStatus& status, absl::Time now);

// What a round of `spec` moves (link_model.h): gossip or a ring
// all-reduce, and one model's wire size (4 bytes per parameter, 2 with BF16).
ExchangeVolume ExchangeVolumeOf(const v1::JobSpec& spec);

// Bytes one worker moves per exchange: the model's wire size times the
// number of model copies the topology sends (1 peer: 1; 2 peers / ring: 2;
// complete-graph gossip: n-1; ring all-reduce over n: 2(n-1)/n).
double ExchangeBytes(const v1::JobSpec& spec, uint32_t members);

// The budget planner's options for a round of `members` workers of `spec`.
BudgetOptions BudgetOptionsFor(const v1::JobSpec& spec, uint32_t members);

// The epoch of the round `round` with `members` (sorted ids), given the
// latest epoch and its members (nullptr: no epoch yet).
struct EpochDecision {
  bool bump = false;   // the members differ: a new epoch starts here
  uint64_t epoch = 0;  // the round's epoch (first epoch = 1)
  uint64_t round = 0;
  size_t members = 0;
  std::vector<uint64_t> joined, left;  // against the previous epoch
  // "epoch 2 from round 1: 3 workers, joined 3, left 2".
  std::string Reason() const;
};
EpochDecision DecideEpoch(uint64_t last_epoch,
                          const std::vector<uint64_t>* last_members,
                          const std::vector<uint64_t>& members,
                          uint64_t round);

// Whether `worker_id`, with nothing planned for it, plans the job's next
// round now: yes when no round is planned yet, when it was in the latest
// round, or when nobody from the latest round is still in the job (checked
// with `in_job`); otherwise it is a new member waiting for the others to
// reach the round boundary.
struct PlanDecision {
  enum class Why {
    kFirstRound,
    kInLatestRound,
    kLatestRoundGone,
    kWaitForBoundary
  };
  bool plan = false;
  Why why = Why::kWaitForBoundary;
  std::string Reason() const;
};
PlanDecision DecidePlanNext(const std::vector<uint64_t>* latest_members,
                            uint64_t worker_id,
                            absl::FunctionRef<bool(uint64_t)> in_job);

// Whether round `round` may be handed out under a round lead bound of
// `max_lead` rounds (spec outer.max_round_lead): yes once every member has
// finished (completed or failed) round round - 1 - max_lead, so nobody
// starts a round more than max_lead rounds ahead of the slowest member.
// Without a bound a pair on fast links runs rounds ahead of a pair on a
// slow one, and when the schedule later pairs across them the early end
// waits for a partner rounds behind until the exchange deadline
// (docs/benchmarks.md, the crossover map at 0.42 Mbit/s). A member's
// finished round is its latest completed or failed round, or the round
// before its first one.
struct MemberProgress {
  uint64_t worker_id = 0;
  int64_t finished_round = -1;
};
struct LeadDecision {
  bool hold = false;
  uint64_t round = 0;
  uint32_t max_lead = 0;
  // round - 1 - max_lead: the round every member must have finished.
  int64_t needed_round = 0;
  uint64_t slowest_worker = 0;  // the member furthest behind (hold only)
  int64_t slowest_finished = -1;
  // "round 5 waits until every member has finished round 3
  // (max_round_lead 1): worker 7 has finished round 2".
  std::string Reason() const;
};
LeadDecision DecideRoundLead(uint64_t round, uint32_t max_lead,
                             const std::vector<MemberProgress>& members);

// The budget changes of a round: member i's H went from old_steps[i] to
// budgets[i].local_steps. A member with no budget yet (old 0) is not a
// change. The reason of a change is budgets[index].Reason().
struct BudgetDiff {
  size_t index = 0;
  uint32_t old_steps = 0;
  uint32_t new_steps = 0;
};
std::vector<BudgetDiff> DiffBudgets(const std::vector<uint32_t>& old_steps,
                                    const std::vector<Budget>& budgets);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_ROUND_PLANNER_H_
