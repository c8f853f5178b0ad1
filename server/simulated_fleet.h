// SimulatedFleet: N simulated worker daemons played against a real
// gasloc-coordinator over gRPC, to measure the coordinator's side of a
// large cluster (issue 38; bench/coordinator_load.py drives it). One
// process, gRPC's callback API and one timer thread, however many
// workers. Each simulated worker does what a daemon does on the wire:
//   - registers (a WorkerInfo with a fake peer address) and heartbeats
//     every lease / 3 with plausible progress;
//   - long-polls GetAssignment; a ROUND "computes" for H_i / s_i seconds
//     (s_i drawn per worker from a range) and is reported with plausible
//     tokens, losses and one link sample per peer;
//   - at the churn rate, a random worker leaves (LeaveWorker) and a new
//     one registers in its place a second later.
// No model, no training and no peer traffic: the coordinator cannot tell.
// The operator's side starts one job over the whole fleet (StartJob) and
// stops it at the end.
//
// Measured: per RPC method the latency (p50, p99, max) and the errors;
// for the long poll, an assignment's delivery: the time from the moment
// its round could be planned (the last report of the round before, or the
// job's start) to the worker holding it. Long polls that expire empty
// (kind NONE after wait_ms) are counted, not timed.
//
// Thread safety: RunSimulatedFleet blocks its caller; inside, gRPC's
// callback threads and the timer thread share the fleet's state under one
// mutex.
#ifndef GASLOC_SERVER_SIMULATED_FLEET_H_
#define GASLOC_SERVER_SIMULATED_FLEET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/credentials.h"

namespace gasloc {

struct FleetOptions {
  std::string coordinator;  // host:port
  CredentialsOptions worker_credentials;    // the workers' calls
  CredentialsOptions operator_credentials;  // StartJob, GetJob, StopJob
  int workers = 10;
  // Simulated workers sharing one channel (one TCP connection); 1 = a
  // connection each, as real daemons have.
  int workers_per_connection = 1;
  // From the job's start to the fleet's stop.
  absl::Duration duration = absl::Seconds(60);
  // Workers leaving (each replaced by a new one) per minute, fleet-wide.
  double churn_per_minute = 0;
  // Each worker's simulated inner-step rate, uniform in this range.
  double min_steps_per_second = 20;
  double max_steps_per_second = 40;
  // The job's H (outer.local_steps).
  uint32_t local_steps = 40;
  // GetAssignment's wait_ms.
  uint32_t wait_ms = 10000;
  uint64_t seed = 1;
};

// One RPC method's (or the assignment delivery's) latencies.
struct LatencySummary {
  std::string name;
  uint64_t calls = 0;
  uint64_t errors = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  std::string first_error;  // empty = none
};

struct FleetReport {
  std::vector<LatencySummary> rpcs;  // one per method called
  // A round's assignment from the moment it could be planned (the last
  // report of the round before) to the worker holding it, rounds >= 1: the
  // steady state. Round 0 apart: every worker at once after the job
  // started (a start-up burst).
  LatencySummary assignment_delivery;
  LatencySummary first_round_delivery;
  uint64_t empty_polls = 0;  // long polls that expired with kind NONE
  uint64_t job_id = 0;
  uint64_t rounds_completed = 0;  // the job's, at the stop
  uint64_t highest_round_assigned = 0;
  uint64_t reports = 0;  // rounds reported by the fleet
  uint64_t joins = 0;    // registrations (first ones and replacements)
  uint64_t leaves = 0;
  std::string job_state;    // JobState name at the stop
  std::string job_message;  // its message
  double seconds = 0;       // the job's measured run, start to stop
};

// Runs the fleet for options.duration after its job started; an error
// only when the fleet could not start (bad options, no coordinator, the
// job refused). Failed calls during the run are counted in the report.
absl::StatusOr<FleetReport> RunSimulatedFleet(const FleetOptions& options);

// The report as one JSON object (bench/coordinator_load.py reads it).
std::string FleetReportJson(const FleetReport& report);

}  // namespace gasloc

#endif  // GASLOC_SERVER_SIMULATED_FLEET_H_
