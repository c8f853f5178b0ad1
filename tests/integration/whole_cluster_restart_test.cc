// Whole-cluster restarts and resumed jobs with real processes (issue 18):
// every worker of a running job is killed with SIGKILL and started again
// with the same state directory (a new worker id, the same stable name).
// No member is left to
// fetch the model from, so each loads its checkpoint of the job's latest
// complete checkpoint set, the one the coordinator recorded (gaslocctl job
// status shows it), never a newer checkpoint only some members wrote, and
// the job trains on from there. A stopped job resumed with gaslocctl job
// resume does the same.
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/support/wait_for.h"

namespace gasloc::testing {
namespace {

namespace fs = std::filesystem;

// A job of two GASLoC workers that checkpoints and evaluates every round,
// with a fixed budget (so a resumed round repeats the work of the round
// it replaces).
v1::JobSpec RestartSpec(Cluster& cluster, int rounds) {
  v1::JobSpec spec = cluster.TinySpec(v1::ALGORITHM_GASLOC, rounds, 2);
  spec.mutable_outer()->set_budget_policy(v1::BUDGET_POLICY_UNIFORM);
  return spec;
}

// Polls the job until `done` says so (fails the test after 90 s).
v1::JobStatus WaitForJob(Cluster& cluster, uint64_t job,
                         const std::function<bool(const v1::JobStatus&)>& done,
                         const std::string& what) {
  v1::JobStatus last;
  if (WaitFor(
          [&] {
            auto st = cluster.GetJob(job);
            if (!st.ok() || !done(*st)) return false;
            last = *st;
            return true;
          },
          absl::Seconds(90), absl::Milliseconds(20)))
    return last;
  ADD_FAILURE() << "timed out waiting for " << what << "; logs in "
                << cluster.dir();
  return {};
}

// A coordinator, two workers and a RestartSpec job of `rounds` rounds,
// returned once the job has a complete checkpoint set of round `set_round`
// or later.
uint64_t StartAndWaitForSet(Cluster& cluster, int rounds, uint64_t set_round) {
  cluster.StartCoordinator();
  if (::testing::Test::HasFatalFailure()) return 0;
  cluster.StartWorkers(2);
  if (::testing::Test::HasFatalFailure()) return 0;
  const uint64_t job = cluster.StartJob(RestartSpec(cluster, rounds));
  if (job == 0) return 0;
  WaitForJob(
      cluster, job,
      [set_round](const v1::JobStatus& st) {
        return st.has_checkpoint_set() &&
               st.checkpoint_set().round() >= set_round;
      },
      absl::StrCat("a complete checkpoint set of round ", set_round));
  return job;
}

void KillWorkers(Cluster& cluster, int n) {
  for (int i = 0; i < n; ++i) cluster.worker(i).Signal(SIGKILL);
  for (int i = 0; i < n; ++i) (void)cluster.worker(i).Wait(absl::Seconds(10));
}

// What worker i's log says after byte `from`: the checkpoint it resumed from
// and the round that checkpoint held the model for; empty path if none yet.
struct Resumed {
  std::string path;
  uint64_t round = 0;
};
Resumed ResumedFrom(Cluster& cluster, int i, size_t from) {
  const std::string log = cluster.WorkerLog(i).substr(from);
  static const std::regex kResumed(R"(resumed from (\S+) at round ([0-9]+))");
  std::smatch match;
  if (!std::regex_search(log, match, kResumed)) return {};
  return {.path = match[1], .round = std::stoull(match[2])};
}

// The first validation bpb worker i logged for a round after byte `from`;
// 0 = none yet.
double FirstValBpbAfter(Cluster& cluster, int i, size_t from) {
  const std::string log = cluster.WorkerLog(i).substr(from);
  static const std::regex kDone(R"(round [0-9]+ done: .*val bpb ([0-9.]+))");
  for (std::sregex_iterator it(log.begin(), log.end(), kDone), end; it != end;
       ++it) {
    const double bpb = std::stod((*it)[1]);
    if (bpb > 0) return bpb;
  }
  return 0;
}

// Starts every worker again and waits until each has resumed; checks that
// each loaded the checkpoint of `set`'s round.
void RestartAndCheckResume(Cluster& cluster, int n, const v1::CheckpointSet& set,
                           std::vector<size_t>* log_offsets,
                           std::vector<Resumed>* resumed) {
  for (int i = 0; i < n; ++i) {
    log_offsets->push_back(cluster.WorkerLog(i).size());
    ASSERT_NO_FATAL_FAILURE(cluster.RestartWorker(i));
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(90);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(WaitFor(
        [&] { return !ResumedFrom(cluster, i, (*log_offsets)[i]).path.empty(); },
        give_up, absl::Milliseconds(50)))
        << "worker " << i << " never resumed:\n" << cluster.WorkerLog(i);
    resumed->push_back(ResumedFrom(cluster, i, (*log_offsets)[i]));
    EXPECT_EQ(resumed->back().round, set.round() + 1)
        << "worker " << i << " loaded " << resumed->back().path
        << ", not its checkpoint of the set's round " << set.round();
  }
}

// The issue's acceptance: kill every worker after round 3, start them again:
// the job resumes from its latest complete set and the next evaluation is
// no worse than the last one before the kill.
TEST(WholeClusterRestart, ResumesFromTheLatestCompleteCheckpointSet) {
  Cluster cluster("restart-all");
  uint64_t job = 0;
  ASSERT_NO_FATAL_FAILURE(job = StartAndWaitForSet(cluster, 10, 3));
  ASSERT_NE(job, 0u);
  KillWorkers(cluster, 2);
  auto before = cluster.GetJob(job);
  ASSERT_TRUE(before.ok()) << before.status();
  const v1::CheckpointSet set = before->checkpoint_set();
  const double last_bpb = before->val_bpb();
  ASSERT_GT(last_bpb, 0) << "no evaluation before the kill";
  EXPECT_EQ(set.worker_ids_size(), 2);

  std::vector<size_t> offsets;
  std::vector<Resumed> resumed;
  ASSERT_NO_FATAL_FAILURE(
      RestartAndCheckResume(cluster, 2, set, &offsets, &resumed));
  const v1::JobStatus end = cluster.WaitForJobEnd(job, absl::Seconds(120));
  EXPECT_EQ(end.state(), v1::JOB_STATE_FINISHED) << end.message();
  cluster.StopAll();
  // Resumed from the set's round, the next evaluation is no worse than the
  // last one before the kill (the resumed round repeats the work of the
  // round after the set's, so it may equal it; 0.5% covers the float
  // reductions of a different thread timing, not a regression: an
  // untrained model is at 8 bits per byte).
  double next_bpb = 0;
  for (int i = 0; i < 2; ++i) {
    const double bpb = FirstValBpbAfter(cluster, i, offsets[i]);
    ASSERT_GT(bpb, 0) << "worker " << i << " never evaluated after the restart";
    next_bpb += bpb / 2;
  }
  EXPECT_LE(next_bpb, last_bpb * 1.005)
      << "last before the kill " << last_bpb << ", first after " << next_bpb;
  std::printf("whole-cluster restart: set round %llu, val bpb %.4f before the "
              "kill, %.4f after\n",
              static_cast<unsigned long long>(set.round()), last_bpb, next_bpb);
}

// One worker cannot write checkpoints for a while (its checkpoint path is
// a folder), the other keeps writing newer ones: the complete set stays at
// the last round both wrote, and after a whole-cluster restart both load
// that round, the second one from its older kept checkpoint.
TEST(WholeClusterRestart, ANewerPartialCheckpointIsNotLoaded) {
  Cluster cluster("restart-partial");
  cluster.set_worker_flags({"--checkpoints_kept=8"});
  uint64_t job = 0;
  ASSERT_NO_FATAL_FAILURE(job = StartAndWaitForSet(cluster, 14, 1));
  ASSERT_NE(job, 0u);
  // Worker 1's latest checkpoint is put aside and a folder takes its name:
  // its next writes fail (it reports no checkpoint).
  const std::string name =
      ReadFile(absl::StrCat(cluster.dir(), "/worker1/worker_name"));
  const std::string latest = absl::StrCat(cluster.dir(), "/ckpt/job", job,
                                          "-", name.substr(0, name.find('\n')),
                                          ".ckpt");
  const std::string aside = latest + ".aside";
  std::error_code error;
  bool blocked = false;
  // (If the worker renames a new checkpoint into place in between, that
  // one goes aside instead.)
  for (int tries = 0; tries < 20 && !blocked; ++tries) {
    fs::rename(latest, aside, error);
    blocked = fs::create_directory(latest, error);
  }
  ASSERT_TRUE(blocked) << "cannot put a folder at " << latest;
  ASSERT_TRUE(fs::create_directory(latest + "/blocked", error)) << error;
  // Worker 0 goes on checkpointing three more rounds.
  const v1::JobStatus mid = WaitForJob(
      cluster, job,
      [](const v1::JobStatus& st) {
        return st.rounds_completed() >= st.checkpoint_set().round() + 4;
      },
      "three rounds past the set");
  KillWorkers(cluster, 2);
  fs::remove_all(latest);
  fs::rename(aside, latest);
  auto before = cluster.GetJob(job);
  ASSERT_TRUE(before.ok()) << before.status();
  const v1::CheckpointSet set = before->checkpoint_set();
  ASSERT_GE(before->rounds_completed(), set.round() + 4) << mid.DebugString();

  std::vector<size_t> offsets;
  std::vector<Resumed> resumed;
  ASSERT_NO_FATAL_FAILURE(
      RestartAndCheckResume(cluster, 2, set, &offsets, &resumed));
  // Worker 0 had newer checkpoints: it loaded an older kept one.
  EXPECT_NE(resumed[0].path.find(".ckpt."), std::string::npos)
      << resumed[0].path;
  const v1::JobStatus end = cluster.WaitForJobEnd(job, absl::Seconds(120));
  EXPECT_EQ(end.state(), v1::JOB_STATE_FINISHED) << end.message();
  EXPECT_GT(end.checkpoint_set().round(), set.round())
      << "no complete set after the restart";
  cluster.StopAll();
}

// gaslocctl with `args` against the cluster: its exit code, and its
// stdout and stderr together.
std::pair<int, std::string> Ctl(Cluster& cluster, const std::string& args) {
  const std::string out = absl::StrCat(cluster.dir(), "/gaslocctl.out");
  const int status = std::system(
      absl::StrCat(BinaryPath("gaslocctl"), " --insecure --coordinator=",
                   cluster.address(), " ", args, " > ", out, " 2>&1")
          .c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out)};
}

// A stopped job resumed with gaslocctl: its workers (idle since the stop)
// take it up again, each from its checkpoint of the job's set, and it
// finishes; gaslocctl job status shows the set; a FINISHED job is refused
// with the reason.
TEST(JobResume, AStoppedJobRunsOnFromItsCheckpointSet) {
  Cluster cluster("resume");
  uint64_t job = 0;
  ASSERT_NO_FATAL_FAILURE(job = StartAndWaitForSet(cluster, 8, 2));
  ASSERT_NE(job, 0u);
  auto [rc, out] = Ctl(cluster, absl::StrCat("job stop ", job));
  ASSERT_EQ(rc, 0) << out;
  auto stopped = WaitForJob(
      cluster, job,
      [](const v1::JobStatus& st) {
        return st.state() == v1::JOB_STATE_STOPPED;
      },
      "the job to stop");
  // Both workers dropped it.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster.WorkerLog(i).find(absl::StrCat(
                     "job ", job, " dropped")) != std::string::npos;
        },
        give_up, absl::Milliseconds(50)))
        << cluster.WorkerLog(i);
  std::tie(rc, out) = Ctl(cluster, absl::StrCat("job status ", job));
  EXPECT_EQ(rc, 0) << out;
  const v1::CheckpointSet set = stopped.checkpoint_set();
  EXPECT_NE(out.find(absl::StrCat("round ", set.round(), " (workers")),
            std::string::npos)
      << out;

  std::vector<size_t> offsets = {cluster.WorkerLog(0).size(),
                                 cluster.WorkerLog(1).size()};
  std::tie(rc, out) = Ctl(cluster, absl::StrCat("job resume ", job));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("RUNNING"), std::string::npos) << out;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(WaitFor(
        [&] { return !ResumedFrom(cluster, i, offsets[i]).path.empty(); },
        give_up, absl::Milliseconds(50)))
        << cluster.WorkerLog(i);
    EXPECT_EQ(ResumedFrom(cluster, i, offsets[i]).round, set.round() + 1);
  }
  const v1::JobStatus end = cluster.WaitForJobEnd(job, absl::Seconds(120));
  EXPECT_EQ(end.state(), v1::JOB_STATE_FINISHED) << end.message();
  std::tie(rc, out) = Ctl(cluster, absl::StrCat("job resume ", job));
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("is FINISHED"), std::string::npos) << out;
  cluster.StopAll();
}

}  // namespace
}  // namespace gasloc::testing
