// Fuzz target: the coordinator's request handlers (what
// server/coordinator_service.cc calls once a caller is authorised) driven
// by any sequence of requests an authorised but broken or hostile worker
// or operator can send: RegisterWorker, Heartbeat, LeaveWorker,
// ListWorkers, StartJob, GetJob, ListJobs, StopJob, ResumeJob,
// GetAssignment, ReportRound, WatchJob's snapshot and event reads, Tick,
// time passing, and a coordinator restart from its SQLite file. Requests
// are serialised protobufs in length-prefixed blobs (FuzzInput format,
// fuzz_bytes.h), parsed as gRPC would parse them; time is a FakeClock with
// auto-advance, so long-polls end at once at their deadline. Properties,
// each a crash:
//   - every response and listing serialises and parses back (UTF-8,
//     below gRPC's 4 MiB default message limit), so `gaslocctl job list`
//     keeps working for everyone;
//   - no job is ever in JOB_STATE_UNSPECIFIED, and a job's token count
//     never goes down (it must not wrap);
//   - a restarted coordinator lists the same jobs in the same states.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "coordinator/coordinator.h"
#include "coordinator/store.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_seeds.h"

namespace gasloc::fuzz {
namespace {

using coordinator::Coordinator;
using coordinator::CoordinatorOptions;
using coordinator::Store;

// GASLOC_FUZZ_TRACE=1 prints each operation and the jobs after it (to
// replay a crashing input: docs/fuzzing.md).
const bool kTrace = std::getenv("GASLOC_FUZZ_TRACE") != nullptr;

// gRPC's default largest receive message.
constexpr size_t kMaxMessageBytes = 4 << 20;

enum class CoordinatorOp : uint8_t {
  kRegister, kHeartbeat, kLeave, kListWorkers, kStartJob, kGetJob,
  kListJobs, kStopJob, kResumeJob, kGetAssignment, kReportRound, kWatch,
  kTick, kAdvance, kRestart, kCount
};

// The SQLite file of this process's coordinator (in memory where /dev/shm
// exists), removed before each input.
const std::string& StorePath() {
  static const std::string path = [] {
    const std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm"
                                            : std::filesystem::temp_directory_path();
    return (base / absl::StrCat("gasloc-coordinator-fuzz.", ::getpid(),
                                ".sqlite"))
        .string();
  }();
  return path;
}

void RemoveStore() {
  for (const char* suffix : {"", "-journal", "-wal", "-shm"})
    std::filesystem::remove(StorePath() + suffix);
}

template <typename Message>
bool Parse(std::string_view blob, Message* message) {
  return message->ParseFromArray(blob.data(), static_cast<int>(blob.size()));
}

template <typename Message>
void CheckSendable(const Message& message, const char* what) {
  const size_t bytes = message.ByteSizeLong();
  GASLOC_FUZZ_CHECK(bytes < kMaxMessageBytes,
                    absl::StrCat(what, " is ", bytes, " bytes"));
  Message back;
  GASLOC_FUZZ_CHECK(back.ParseFromString(message.SerializeAsString()),
                    absl::StrCat(what, " does not parse back"));
}

class CoordinatorFuzz {
 public:
  explicit CoordinatorFuzz(FuzzInput& in) : in_(in) {
    clock_.SetAutoAdvance(true);
    options_.lease = absl::Seconds(10);
    options_.default_wait = absl::Seconds(1);
    options_.rounds_kept = 8;
    options_.events_kept = 32;
    options_.retention.max_ended = 4;
    RemoveStore();
    Start();
  }
  ~CoordinatorFuzz() {
    coordinator_.reset();
    RemoveStore();
  }

  void Run() {
    for (int ops = 0; !in_.empty() && ops < 128; ++ops) {
      const uint8_t op = in_.Take<uint8_t>() %
                         static_cast<uint8_t>(CoordinatorOp::kCount);
      if (kTrace) std::fprintf(stderr, "op %d\n", op);
      Apply(static_cast<CoordinatorOp>(op));
      CheckJobs();
    }
  }

 private:
  void Start() {
    auto store = Store::Open(StorePath());
    GASLOC_FUZZ_CHECK(store.ok(), store.status().ToString());
    auto created =
        Coordinator::Create(options_, std::move(*store), &clock_);
    GASLOC_FUZZ_CHECK(created.ok(), created.status().ToString());
    coordinator_ = std::move(*created);
  }

  uint64_t JobId() { return in_.TakeInRange(0, 4); }

  void Apply(CoordinatorOp op) {
    Coordinator& c = *coordinator_;
    switch (op) {
      case CoordinatorOp::kRegister: {
        v1::RegisterWorkerRequest request;
        if (!Parse(in_.TakeBlob(1 << 16), &request)) return;
        auto response = c.RegisterWorker(request);
        if (response.ok()) CheckSendable(*response, "RegisterWorkerResponse");
        return;
      }
      case CoordinatorOp::kHeartbeat: {
        v1::HeartbeatRequest request;
        if (!Parse(in_.TakeBlob(1 << 16), &request)) return;
        auto response = c.Heartbeat(request);
        if (response.ok()) CheckSendable(*response, "HeartbeatResponse");
        return;
      }
      case CoordinatorOp::kLeave: {
        v1::LeaveWorkerRequest request;
        if (!Parse(in_.TakeBlob(1 << 16), &request)) return;
        (void)c.LeaveWorker(request);
        return;
      }
      case CoordinatorOp::kListWorkers: {
        v1::ListWorkersRequest request;
        request.set_include_gone(in_.TakeBool());
        CheckSendable(c.ListWorkers(request), "ListWorkersResponse");
        return;
      }
      case CoordinatorOp::kStartJob: {
        v1::JobSpec spec;
        if (!Parse(in_.TakeBlob(1 << 16), &spec)) return;
        auto job = c.StartJob(spec);
        if (job.ok()) CheckSendable(*job, "StartJob's JobStatus");
        return;
      }
      case CoordinatorOp::kGetJob: {
        auto job = c.GetJob(JobId());
        if (job.ok()) CheckSendable(*job, "JobStatus");
        return;
      }
      case CoordinatorOp::kListJobs: return;  // CheckJobs lists after each op
      case CoordinatorOp::kStopJob: {
        v1::StopJobRequest request;
        if (!Parse(in_.TakeBlob(1 << 16), &request)) return;
        (void)c.StopJob(request.job_id(), request.reason());
        return;
      }
      case CoordinatorOp::kResumeJob: {
        const uint64_t job = JobId();
        (void)c.ResumeJob(job, std::string(in_.TakeBlob(64)));
        return;
      }
      case CoordinatorOp::kGetAssignment: {
        v1::GetAssignmentRequest request;
        if (!Parse(in_.TakeBlob(1 << 16), &request)) return;
        request.set_wait_ms(request.wait_ms() % 2001);
        auto assignment = c.GetAssignment(request);
        if (kTrace)
          std::fprintf(stderr, "  assignment: %s\n",
                       assignment.ok()
                           ? absl::StrCat(v1::AssignmentKind_Name(assignment->kind()), " round ", assignment->round()).c_str()
                           : assignment.status().ToString().c_str());
        if (assignment.ok()) CheckSendable(*assignment, "Assignment");
        return;
      }
      case CoordinatorOp::kReportRound: {
        v1::ReportRoundRequest request;
        if (!Parse(in_.TakeBlob(1 << 16), &request)) return;
        const absl::Status reported = c.ReportRound(request);
        if (kTrace)
          std::fprintf(stderr, "  report: %s\n", reported.ToString().c_str());
        return;
      }
      case CoordinatorOp::kWatch: {
        const uint64_t job = JobId();
        const uint64_t after_seq = in_.TakeInRange(0, 64);
        auto snapshot = c.WatchSnapshot(job);
        if (!snapshot.ok()) return;
        CheckSendable(snapshot->first, "WatchJob's snapshot");
        auto events = c.WaitJobEvents(job, after_seq, absl::ZeroDuration());
        if (events.ok())
          for (const v1::JobEvent& event : events->events)
            CheckSendable(event, "JobEvent");
        return;
      }
      case CoordinatorOp::kTick: c.Tick(); return;
      case CoordinatorOp::kAdvance:
        clock_.Advance(absl::Milliseconds(in_.TakeInRange(0, 30000)));
        return;
      case CoordinatorOp::kRestart: Restart(); return;
      case CoordinatorOp::kCount: return;
    }
  }

  // The same jobs in the same states after a restart from the file.
  void Restart() {
    const v1::ListJobsResponse before = coordinator_->ListJobs();
    coordinator_.reset();
    Start();
    const v1::ListJobsResponse after = coordinator_->ListJobs();
    std::map<uint64_t, v1::JobState> states;
    for (const v1::JobStatus& job : before.jobs())
      states[job.job_id()] = job.state();
    GASLOC_FUZZ_CHECK(after.jobs_size() == before.jobs_size(),
                      absl::StrCat(before.jobs_size(), " jobs before the "
                                   "restart, ", after.jobs_size(), " after"));
    for (const v1::JobStatus& job : after.jobs()) {
      auto it = states.find(job.job_id());
      GASLOC_FUZZ_CHECK(it != states.end(),
                        absl::StrCat("job ", job.job_id(), " appeared"));
      GASLOC_FUZZ_CHECK(it->second == job.state(),
                        absl::StrCat("job ", job.job_id(), " was ",
                                     v1::JobState_Name(it->second), ", is ",
                                     v1::JobState_Name(job.state())));
    }
  }

  void CheckJobs() {
    const v1::ListJobsResponse jobs = coordinator_->ListJobs();
    CheckSendable(jobs, "ListJobsResponse");
    if (kTrace)
      for (const v1::JobStatus& job : jobs.jobs())
        std::fprintf(stderr, "  job %lu %s rounds %lu tokens %lu: %s\n",
                     job.job_id(), v1::JobState_Name(job.state()).c_str(),
                     job.rounds_completed(), job.tokens(),
                     job.message().c_str());
    for (const v1::JobStatus& job : jobs.jobs()) {
      GASLOC_FUZZ_CHECK(job.state() != v1::JOB_STATE_UNSPECIFIED,
                        absl::StrCat("job ", job.job_id()));
      uint64_t& tokens = tokens_[job.job_id()];
      GASLOC_FUZZ_CHECK(job.tokens() >= tokens,
                        absl::StrCat("job ", job.job_id(), " tokens went from ",
                                     tokens, " to ", job.tokens()));
      tokens = job.tokens();
    }
  }

  FuzzInput& in_;
  FakeClock clock_;
  CoordinatorOptions options_;
  std::unique_ptr<Coordinator> coordinator_;
  std::map<uint64_t, uint64_t> tokens_;
};

// Writes inputs in the order CoordinatorFuzz reads them.
class CoordinatorSeed {
 public:
  template <typename Message>
  CoordinatorSeed& Send(CoordinatorOp op, const Message& message) {
    Op(op);
    out_.PutBlob(message.SerializeAsString());
    return *this;
  }
  CoordinatorSeed& Op(CoordinatorOp op) {
    out_.Put<uint8_t>(static_cast<uint8_t>(op));
    return *this;
  }
  CoordinatorSeed& Job(CoordinatorOp op, uint64_t job_id) {
    Op(op);
    out_.PutInRange(0, job_id);
    return *this;
  }
  CoordinatorSeed& Resume(uint64_t job_id, std::string_view reason) {
    Job(CoordinatorOp::kResumeJob, job_id);
    out_.PutBlob(reason);
    return *this;
  }
  CoordinatorSeed& Watch(uint64_t job_id, uint64_t after_seq) {
    Job(CoordinatorOp::kWatch, job_id);
    out_.PutInRange(0, after_seq);
    return *this;
  }
  CoordinatorSeed& Advance(uint64_t ms) {
    Op(CoordinatorOp::kAdvance);
    out_.PutInRange(0, ms);
    return *this;
  }
  const std::string& bytes() const { return out_.bytes(); }

 private:
  FuzzOutput out_;
};

v1::RegisterWorkerRequest Register(int i) {
  v1::RegisterWorkerRequest request;
  v1::WorkerInfo* info = request.mutable_info();
  info->set_address(absl::StrCat("127.0.0.1:70", 70 + i));
  info->set_cores(2);
  info->set_memory_bytes(uint64_t{8} << 30);
  info->set_software_version("0.1.0");
  info->set_hostname(absl::StrCat("host", i));
  info->set_name(absl::StrCat("worker", i));
  return request;
}

v1::JobSpec TinyJob(v1::Algorithm algorithm) {
  v1::JobSpec spec;
  spec.set_name("fuzz");
  spec.mutable_model()->set_layers(1);
  spec.mutable_model()->set_d_model(16);
  spec.mutable_model()->set_heads(1);
  spec.mutable_model()->set_context(16);
  spec.mutable_data()->set_corpus_path("/usr/share/common-licenses");
  spec.mutable_outer()->set_algorithm(algorithm);
  spec.mutable_outer()->set_local_steps(10);
  spec.mutable_stop()->set_max_rounds(3);
  spec.set_min_workers(2);
  return spec;
}

v1::GetAssignmentRequest Ask(uint64_t worker, int64_t after_round) {
  v1::GetAssignmentRequest request;
  request.set_worker_id(worker);
  if (after_round >= 0) request.set_job_id(1);
  request.set_after_round(after_round);
  return request;
}

v1::ReportRoundRequest Report(uint64_t worker, uint64_t round) {
  v1::ReportRoundRequest request;
  request.set_worker_id(worker);
  request.set_job_id(1);
  request.set_round(round);
  request.set_inner_steps(10);
  request.set_compute_seconds(1.5);
  request.set_exchange_seconds(0.25);
  request.set_bytes_sent(4096);
  request.set_bytes_received(4096);
  request.set_train_loss(2.5f);
  request.set_val_bpb(3.0f);
  request.set_tokens(640);
  return request;
}

}  // namespace

void WriteSeeds(SeedWriter& seeds) {
  for (v1::Algorithm algorithm :
       {v1::ALGORITHM_GASLOC, v1::ALGORITHM_DILOCO}) {
    CoordinatorSeed seed;
    seed.Send(CoordinatorOp::kRegister, Register(1))
        .Send(CoordinatorOp::kRegister, Register(2))
        .Send(CoordinatorOp::kStartJob, TinyJob(algorithm));
    for (uint64_t round = 0; round < 3; ++round) {
      for (uint64_t worker : {1, 2}) {
        seed.Send(CoordinatorOp::kGetAssignment,
                  Ask(worker, static_cast<int64_t>(round) - 1));
        seed.Send(CoordinatorOp::kReportRound, Report(worker, round));
      }
      seed.Advance(2000);
    }
    seed.Job(CoordinatorOp::kGetJob, 1).Op(CoordinatorOp::kRestart);
    seeds.Add(absl::StrCat("three_rounds_", v1::Algorithm_Name(algorithm)),
              seed.bytes());
  }
  v1::StopJobRequest stop;
  stop.set_job_id(1);
  stop.set_reason("operator \x1b[2J stop");
  v1::LeaveWorkerRequest leave;
  leave.set_worker_id(2);
  leave.set_reason("draining");
  seeds.Add("stop_resume_leave",
            CoordinatorSeed()
                .Send(CoordinatorOp::kRegister, Register(1))
                .Send(CoordinatorOp::kRegister, Register(2))
                .Send(CoordinatorOp::kStartJob, TinyJob(v1::ALGORITHM_GASLOC))
                .Send(CoordinatorOp::kGetAssignment, Ask(1, -1))
                .Send(CoordinatorOp::kReportRound, Report(1, 0))
                .Send(CoordinatorOp::kStopJob, stop)
                .Resume(1, "try again")
                .Send(CoordinatorOp::kLeave, leave)
                .Advance(30000)
                .Op(CoordinatorOp::kTick)
                .Watch(1, 0)
                .Op(CoordinatorOp::kRestart)
                .bytes());
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gasloc::fuzz::FuzzInput in(data, size);
  gasloc::fuzz::CoordinatorFuzz(in).Run();
  return 0;
}
