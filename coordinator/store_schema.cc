// The Store's schema: the migrations from version 0 (an empty database)
// to the current one (store.h Migrations).
#include "coordinator/store.h"

namespace gasloc::coordinator {

const std::vector<std::string>& Migrations() {
  static const auto* const kMigrations = new std::vector<std::string>{
      // 1: workers, jobs, job members, membership epochs.
      R"sql(
        CREATE TABLE workers (
          worker_id INTEGER PRIMARY KEY,
          info BLOB NOT NULL,              -- gasloc.v1.WorkerInfo
          registered_unix_ms INTEGER NOT NULL,
          state INTEGER NOT NULL,          -- gasloc.v1.WorkerState
          job_id INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE jobs (
          job_id INTEGER PRIMARY KEY,
          name TEXT NOT NULL,
          state INTEGER NOT NULL,          -- gasloc.v1.JobState
          status BLOB NOT NULL,            -- gasloc.v1.JobStatus
          stop_round INTEGER NOT NULL DEFAULT -1);
        CREATE TABLE job_members (
          job_id INTEGER NOT NULL,
          worker_id INTEGER NOT NULL,
          first_round INTEGER NOT NULL,
          last_reported_round INTEGER NOT NULL,
          steps_per_second REAL NOT NULL,
          bytes_per_second REAL NOT NULL,
          local_steps INTEGER NOT NULL,
          train_loss REAL NOT NULL,
          val_bpb REAL NOT NULL,
          got_stop INTEGER NOT NULL,
          PRIMARY KEY (job_id, worker_id));
        CREATE TABLE epochs (
          job_id INTEGER NOT NULL,
          epoch INTEGER NOT NULL,
          first_round INTEGER NOT NULL,
          members TEXT NOT NULL,           -- sorted worker ids, comma-separated
          PRIMARY KEY (job_id, epoch));
      )sql",
      // 2: planned rounds with their budgets, so a restarted coordinator
      // hands out exactly the rounds it had planned.
      R"sql(
        CREATE TABLE rounds (
          job_id INTEGER NOT NULL,
          round INTEGER NOT NULL,
          epoch INTEGER NOT NULL,
          planned_unix_ms INTEGER NOT NULL,
          deadline_unix_ms INTEGER NOT NULL,
          budgets BLOB NOT NULL,           -- EncodeBudgets(), member order
          PRIMARY KEY (job_id, round));
      )sql",
      // 3: failed rounds (not progress: they do not count toward
      // stop.max_rounds), each member's failures in a row, the workers
      // dropped for them and the first error since the job last made
      // progress (docs/operations.md, "When a job fails").
      R"sql(
        ALTER TABLE jobs ADD COLUMN rounds_failed INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE jobs ADD COLUMN rounds_decided INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE jobs ADD COLUMN first_failure TEXT NOT NULL DEFAULT '';
        ALTER TABLE jobs ADD COLUMN dropped TEXT NOT NULL DEFAULT '';
                                           -- worker ids, comma-separated
        ALTER TABLE job_members ADD COLUMN consecutive_failures INTEGER
          NOT NULL DEFAULT 0;
      )sql",
      // 4: each round's place on the job's learning-rate horizon
      // (Assignment.schedule_progress_begin / _end), so a restarted
      // coordinator hands out the same numbers; -1 = none (the rounds x H
      // schedule, and every round stored before this version).
      R"sql(
        ALTER TABLE rounds ADD COLUMN schedule_begin REAL NOT NULL DEFAULT -1;
        ALTER TABLE rounds ADD COLUMN schedule_end REAL NOT NULL DEFAULT -1;
      )sql",
  };
  return *kMigrations;
}

}  // namespace gasloc::coordinator
