#include "coordinator/coordinator_metrics.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/scrape_collectable.h"
#include "coordinator/coordinator.h"

namespace gasloc::coordinator {
namespace {

constexpr const char* kJobFailureReasons[] = {
    "setup", "round_failures", "non_finite_loss", "no_live_worker"};

constexpr const char* kBudgetReasons[] = {"no_measurement", "uniform",
                                          "adaptive", "min_clamp",
                                          "nominal_clamp", "stretched",
                                          "noise_band"};

// A counter family registered with `registry` (name and help first, so a
// family reads like its docs/metrics.md row).
prometheus::Family<prometheus::Counter>& CounterFamily(
    const char* name, const char* help, prometheus::Registry& registry) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Labels JobLabels(uint64_t job_id) {
  return {{"job_id", absl::StrCat(job_id)}};
}

prometheus::Labels BudgetLabels(uint64_t job_id, const char* reason) {
  return {{"job_id", absl::StrCat(job_id)}, {"reason", reason}};
}

// "JOB_STATE_RUNNING" -> "running".
std::string StateLabel(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  absl::string_view view = name;
  absl::ConsumePrefix(&view, "JOB_STATE_");
  return absl::AsciiStrToLower(view);
}

}  // namespace

const char* BudgetChangeReason(const Budget& budget) {
  switch (budget.basis) {
    case Budget::Basis::kNoMeasurement:
      return "no_measurement";
    case Budget::Basis::kUniform:
      return "uniform";
    case Budget::Basis::kAdaptive:
      break;
  }
  if (budget.guard == Budget::Guard::kNoiseBand) return "noise_band";
  if (budget.raw_steps < budget.min_steps) return "min_clamp";
  // nominal_clamp: clamped down to the ceiling (H, or H_max above it).
  const uint32_t ceiling = std::max(budget.nominal_steps, budget.max_steps);
  if (budget.raw_steps > ceiling) return "nominal_clamp";
  if (budget.local_steps > budget.nominal_steps) return "stretched";
  return "adaptive";
}

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : joins_(CounterFamily("gasloc_coordinator_worker_joins_total",
                           "Workers that joined the cluster, by reason",
                           registry)),
      leaves_(CounterFamily("gasloc_coordinator_worker_leaves_total",
                            "Workers that left the cluster, by reason",
                            registry)),
      failures_(CounterFamily(
          "gasloc_coordinator_worker_failures_total",
          "Failed job set-ups and rounds reported by workers, by kind",
          registry)),
      divergences_(CounterFamily(
          "gasloc_coordinator_replica_divergence_total",
          "Replicas of all-reduce rounds (DiLoCo, local SGD, data-parallel) "
          "found apart from the majority and re-synchronised, by reason",
          registry)),
      jobs_failed_(CounterFamily("gasloc_coordinator_jobs_failed_total",
                                 "Running jobs that ended FAILED, by reason",
                                 registry)),
      members_dropped_(
          CounterFamily("gasloc_coordinator_members_dropped_total",
                        "Members dropped from their job for failing "
                        "max_consecutive_round_failures rounds in a row",
                        registry)
              .Add({})),
      round_lead_holds_(
          CounterFamily("gasloc_coordinator_round_lead_holds_total",
                        "Members held at a round boundary by their job's "
                        "round lead bound (outer.max_round_lead), once per "
                        "member and round",
                        registry)
              .Add({})),
      rounds_planned_(CounterFamily("gasloc_coordinator_rounds_planned_total",
                                    "Outer rounds planned", registry)),
      budget_changes_(CounterFamily(
          "gasloc_coordinator_budget_changes_total",
          "Changes of a worker's local-step budget H_i, by reason", registry)),
      rpcs_(CounterFamily("gasloc_coordinator_rpcs_total",
                          "Coordinator RPCs handled, by method", registry)),
      rpc_errors_(CounterFamily(
          "gasloc_coordinator_rpc_errors_total",
          "Coordinator RPCs that failed, by method and code", registry)),
      planning_duration_(
          prometheus::BuildHistogram()
              .Name("gasloc_coordinator_round_planning_duration_seconds")
              .Help("Wall time to plan one round (membership, schedule, "
                    "budgets, persistence)")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{
                           0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1,
                           0.3, 1})) {
  // Every reason and method from the start, so rates see 0, not nothing.
  for (const char* reason : {"registered", "restored"}) joins_.Add({{"reason", reason}});
  for (const char* reason : {"left", "lease_expired"}) leaves_.Add({{"reason", reason}});
  for (const char* kind : {"setup", "round"}) failures_.Add({{"kind", kind}});
  for (const char* reason : {"checksum", "behind"})
    divergences_.Add({{"reason", reason}});
  for (const char* reason : kJobFailureReasons)
    jobs_failed_.Add({{"reason", reason}});
  for (const char* method : kRpcMethods)
    rpc_counters_[method] = &rpcs_.Add({{"method", method}});
}

void CoordinatorMetrics::RecordWorkerJoin(const char* reason) {
  joins_.Add({{"reason", reason}}).Increment();
}

void CoordinatorMetrics::RecordWorkerLeave(const char* reason) {
  leaves_.Add({{"reason", reason}}).Increment();
}

void CoordinatorMetrics::RecordWorkerFailure(const char* kind) {
  failures_.Add({{"kind", kind}}).Increment();
}

void CoordinatorMetrics::RecordReplicaDivergence(const char* reason,
                                                 uint64_t replicas) {
  divergences_.Add({{"reason", reason}}).Increment(static_cast<double>(replicas));
}

void CoordinatorMetrics::RecordJobFailed(const char* reason) {
  jobs_failed_.Add({{"reason", reason}}).Increment();
}

void CoordinatorMetrics::RecordMemberDropped() { members_dropped_.Increment(); }

void CoordinatorMetrics::RecordRoundLeadHold() { round_lead_holds_.Increment(); }

void CoordinatorMetrics::BeginJob(uint64_t job_id) {
  rounds_planned_.Add(JobLabels(job_id));
  for (const char* reason : kBudgetReasons)
    budget_changes_.Add(BudgetLabels(job_id, reason));
}

void CoordinatorMetrics::EndJob(uint64_t job_id) {
  rounds_planned_.Remove(&rounds_planned_.Add(JobLabels(job_id)));
  for (const char* reason : kBudgetReasons)
    budget_changes_.Remove(&budget_changes_.Add(BudgetLabels(job_id, reason)));
}

void CoordinatorMetrics::RecordRoundPlanned(uint64_t job_id,
                                            double planning_seconds) {
  rounds_planned_.Add(JobLabels(job_id)).Increment();
  planning_duration_.Observe(planning_seconds);
}

void CoordinatorMetrics::RecordBudgetChange(uint64_t job_id,
                                            const Budget& budget) {
  budget_changes_.Add(BudgetLabels(job_id, BudgetChangeReason(budget)))
      .Increment();
}

void CoordinatorMetrics::RecordRpc(absl::string_view method,
                                   absl::StatusCode code) {
  auto it = rpc_counters_.find(method);
  if (it != rpc_counters_.end()) it->second->Increment();
  if (code == absl::StatusCode::kOk) return;
  rpc_errors_
      .Add({{"method", std::string(method)},
            {"code", absl::StatusCodeToString(code)}})
      .Increment();
}

std::shared_ptr<prometheus::Collectable> CoordinatorGauges(
    Coordinator* coordinator) {
  return std::make_shared<ScrapeCollectable>([coordinator] {
    const CoordinatorGaugeState state = coordinator->GaugeState();
    std::vector<GaugeSample> jobs, epochs, members, ages, steps, waits;
    for (const auto& [job_state, count] : state.jobs_by_state)
      jobs.push_back({{{"state", StateLabel(job_state)}}, double(count)});
    for (const auto& job : state.active_jobs) {
      const std::string id = absl::StrCat(job.job_id);
      epochs.push_back({{{"job_id", id}}, double(job.epoch)});
      members.push_back({{{"job_id", id}}, double(job.members)});
      for (const auto& b : job.budgets) {
        const std::string worker = absl::StrCat(b.worker_id);
        steps.push_back(
            {{{"job_id", id}, {"worker_id", worker}}, double(b.local_steps)});
        waits.push_back(
            {{{"job_id", id}, {"worker_id", worker}}, b.wait_fraction});
      }
    }
    for (const auto& worker : state.live_workers)
      ages.push_back({{{"worker_id", absl::StrCat(worker.worker_id)}},
                      worker.heartbeat_age_seconds});
    std::vector<prometheus::MetricFamily> families;
    families.push_back(GaugeFamily("gasloc_coordinator_live_workers",
                                   "Workers alive (lease not expired)",
                                   {{{}, double(state.live_workers.size())}}));
    families.push_back(GaugeFamily("gasloc_coordinator_jobs",
                                   "Jobs by state", jobs));
    families.push_back(GaugeFamily(
        "gasloc_coordinator_membership_epoch",
        "Membership epoch of a pending or running job", epochs));
    families.push_back(GaugeFamily("gasloc_coordinator_job_members",
                                   "Workers bound to a pending or running job",
                                   members));
    families.push_back(GaugeFamily(
        "gasloc_coordinator_worker_heartbeat_age_seconds",
        "Time since a live worker's last call", ages));
    families.push_back(GaugeFamily(
        "gasloc_coordinator_worker_local_steps",
        "Local-step budget H_i of a member in its job's latest planned round",
        steps));
    families.push_back(GaugeFamily(
        "gasloc_coordinator_worker_wait_fraction",
        "Fraction of a member's latest reported round spent waiting for "
        "peers (wait / (compute + exchange))",
        waits));
    return families;
  });
}

}  // namespace gasloc::coordinator
