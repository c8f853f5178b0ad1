// The coordinator's database lost (issue 18 acceptance): the coordinator is
// killed while two workers run a job, its SQLite file is deleted and it
// starts again, empty, on the same address, and a new job is started at
// once (it gets the old job's id, 1, in the new database). The workers
// register anew, drop the job they held and take the new one within a
// lease period, which trains from its round 0 and finishes.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/support/wait_for.h"

namespace gasloc::testing {
namespace {

constexpr absl::Duration kLease = absl::Seconds(3);  // test_cluster's

TEST(CoordinatorLoss, WorkersTakeANewJobWithinALeasePeriod) {
  Cluster cluster("db-loss");
  ASSERT_NO_FATAL_FAILURE(cluster.StartCoordinator());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const uint64_t old_job =
      cluster.StartJob(cluster.TinySpec(v1::ALGORITHM_GASLOC, 1000, 2));
  ASSERT_NE(old_job, 0u);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto st = cluster.GetJob(old_job);
        return st.ok() && st->rounds_completed() >= 2;
      },
      absl::Seconds(60), absl::Milliseconds(20)))
      << "the first job did not train";
  const size_t log0 = cluster.WorkerLog(0).size();
  ASSERT_NO_FATAL_FAILURE(cluster.RestartCoordinator(/*delete_database=*/true));
  const absl::Time restarted = absl::Now();
  const uint64_t job =
      cluster.StartJob(cluster.TinySpec(v1::ALGORITHM_GASLOC, 3, 2));
  EXPECT_EQ(job, old_job) << "a new database numbers jobs from 1 again";

  // Both workers are members of the new job within a lease period.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto st = cluster.GetJob(job);
        return st.ok() && st->state() == v1::JOB_STATE_RUNNING &&
               st->worker_ids_size() == 2;
      },
      restarted + absl::Seconds(30), absl::Milliseconds(20)))
      << "the workers never took the new job; logs in " << cluster.dir()
      << "\n" << cluster.WorkerLog(0).substr(log0);
  const absl::Duration took = absl::Now() - restarted;
  std::printf("both workers in the new job %.2f s after the restart\n",
              absl::ToDoubleSeconds(took));
  const v1::JobStatus end = cluster.WaitForJobEnd(job, absl::Seconds(60));
  EXPECT_EQ(end.state(), v1::JOB_STATE_FINISHED) << end.message();
  EXPECT_EQ(end.rounds_completed(), 3u);
  cluster.StopAll();
  // Within a lease period of the restart (re-registering takes a failed
  // heartbeat and a retry, about lease / 3 each).
  EXPECT_LE(took, kLease) << "slower than a lease period";
  // Worker 0 dropped the old job's model instead of training it on as the
  // new job 1.
  const std::string log = cluster.WorkerLog(0).substr(log0);
  EXPECT_NE(log.find(absl::StrCat("job ", old_job, " dropped")),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace gasloc::testing
