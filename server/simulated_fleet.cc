#include "server/simulated_fleet.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/json_string.h"
#include "common/log.h"
#include "common/timer_thread.h"
#include "common/version.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/channel_arguments.h"

namespace gasloc {
namespace {

// The methods timed, in the report's order.
enum Method {
  kRegister,
  kHeartbeat,
  kGetAssignment,
  kReportRound,
  kLeave,
  kStartJob,
  kMethods
};
constexpr const char* kMethodNames[kMethods] = {
    "RegisterWorker", "Heartbeat", "GetAssignment",
    "ReportRound",    "LeaveWorker", "StartJob"};
// A unary call that should not take longer than this (the long poll adds
// its wait_ms).
constexpr absl::Duration kCallDeadline = absl::Seconds(30);

LatencySummary Summarise(std::string name, std::vector<double> ms,
                         uint64_t errors, std::string first_error) {
  LatencySummary s;
  s.name = std::move(name);
  s.calls = ms.size() + errors;
  s.errors = errors;
  s.first_error = std::move(first_error);
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto at = [&ms](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * ms.size())) - 1;
    return ms[std::min(i, ms.size() - 1)];
  };
  s.p50_ms = at(0.5);
  s.p99_ms = at(0.99);
  s.max_ms = ms.back();
  return s;
}

class Fleet {
 public:
  explicit Fleet(const FleetOptions& options)
      : options_(options), random_(options.seed) {}

  absl::StatusOr<FleetReport> Run();
  // No call in flight: the fleet may be destroyed.
  bool Drained() {
    absl::MutexLock lock(&mu_);
    return outstanding_ == 0;
  }

 private:
  // One simulated worker slot; a churned worker is replaced in its slot
  // (a new registration: a new id).
  struct Worker {
    v1::Coordinator::Stub* stub = nullptr;
    uint64_t id = 0;     // 0 = not registered
    uint64_t generation = 0;  // bumped when the slot's worker leaves
    double steps_per_second = 0;
    uint64_t job = 0;
    int64_t after_round = -1;
    uint64_t round = 0;
    uint64_t total_steps = 0;
    std::vector<uint64_t> peers;  // of the round in progress
    // The member list held, as a worker's PeerRoster says it
    // (GetAssignmentRequest.members_epoch); job 0 = none.
    uint64_t members_job = 0;
    uint64_t members_epoch = 0;
  };

  template <typename Request, typename Response>
  struct Call {
    grpc::ClientContext context;
    Request request;
    Response response;
    absl::Time start;
  };

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }
  // Records a finished call; true when it succeeded.
  // Records a finished call: its latency when it succeeded (and `timed`),
  // else its error. True when it succeeded.
  bool Record(Method method, absl::Time start, const grpc::Status& status) {
    const double ms = absl::ToDoubleMilliseconds(clock_.Now() - start);
    absl::MutexLock lock(&mu_);
    return RecordLocked(method, ms, status);
  }
  bool RecordLocked(Method method, double ms, const grpc::Status& status,
                    bool timed = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (status.ok()) {
      if (timed) latencies_[method].push_back(ms);
      return true;
    }
    // A cancel at the fleet's stop is not the coordinator's error.
    if (stopping_ && status.error_code() == grpc::StatusCode::CANCELLED)
      return false;
    ++errors_[method];
    if (first_error_[method].empty())
      first_error_[method] = absl::StrCat(status.error_code(), ": ",
                                          status.error_message());
    return false;
  }
  // Starts `call` through the stub's async `method` with a deadline
  // `timeout` from now (and call->start now); `done` runs with its status
  // on a gRPC thread, `call` alive until then.
  template <typename Request, typename Response>
  using AsyncMethod = void (v1::Coordinator::Stub::async::*)(
      grpc::ClientContext*, const Request*, Response*,
      std::function<void(grpc::Status)>);
  template <typename Request, typename Response>
  void Send(v1::Coordinator::Stub* stub,
            AsyncMethod<Request, Response> method,
            std::shared_ptr<Call<Request, Response>> call,
            absl::Duration timeout,
            std::function<void(grpc::Status)> done) {
    call->start = clock_.Now();
    call->context.set_deadline(absl::ToChronoTime(call->start + timeout));
    Call<Request, Response>* raw = call.get();
    (stub->async()->*method)(
        &raw->context, &raw->request, &raw->response,
        [call = std::move(call), done = std::move(done)](grpc::Status status) {
          done(std::move(status));
        });
  }
  void Register(int slot);
  void Heartbeat(int slot, uint64_t generation);
  void Poll(int slot, uint64_t generation);
  void Report(int slot, uint64_t generation, uint64_t job, uint64_t round,
              uint32_t steps, double seconds);
  void Churn();
  void Leave(int slot);
  // Run's steps: channels and stubs; every worker registered; the job
  // started; the run with its churn and progress lines; the stop.
  absl::Status Connect();
  absl::Status RegisterAll();
  absl::Status StartJob();
  void RunFor(absl::Duration duration);
  void StopAll();
  FleetReport Summary(const absl::StatusOr<v1::JobStatus>& job,
                      double seconds);
  void Start() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++outstanding_; }
  absl::Duration HeartbeatEvery() {
    absl::MutexLock lock(&mu_);
    return heartbeat_every_;
  }
  void Finish() {
    absl::MutexLock lock(&mu_);
    --outstanding_;
  }
  absl::StatusOr<v1::JobStatus> GetJob(uint64_t job_id);

  const FleetOptions options_;
  const Clock& clock_ = RealClock::Get();
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::unique_ptr<v1::Coordinator::Stub> operator_stub_;

  absl::Mutex mu_;
  absl::Duration heartbeat_every_ ABSL_GUARDED_BY(mu_) = absl::Seconds(3);
  std::mt19937_64 random_ ABSL_GUARDED_BY(mu_);
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<grpc::ClientContext*> polls_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_[kMethods] ABSL_GUARDED_BY(mu_);
  uint64_t errors_[kMethods] ABSL_GUARDED_BY(mu_) = {};
  std::string first_error_[kMethods] ABSL_GUARDED_BY(mu_);
  // When each round could be planned: the last report of the round before
  // (round 0: the job's start), and the deliveries timed from it.
  std::map<uint64_t, absl::Time> last_report_ ABSL_GUARDED_BY(mu_);
  absl::Time job_started_ ABSL_GUARDED_BY(mu_);
  // Rounds >= 1 (steady state), and round 0 (every worker at once, from
  // the job's start).
  std::vector<double> delivery_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<double> first_delivery_ms_ ABSL_GUARDED_BY(mu_);
  uint64_t empty_polls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t highest_round_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t joins_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t leaves_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t job_id_ = 0;
  // Last: destroyed first, so that no timer runs on a destroyed fleet.
  TimerThread timers_;
};

void Fleet::Register(int slot) {
  auto call = std::make_shared<
      Call<v1::RegisterWorkerRequest, v1::RegisterWorkerResponse>>();
  v1::Coordinator::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    Worker& w = workers_[slot];
    stub = w.stub;
    std::uniform_real_distribution<double> rate(
        options_.min_steps_per_second, options_.max_steps_per_second);
    w.steps_per_second = rate(random_);
    v1::WorkerInfo* info = call->request.mutable_info();
    // A fake peer address: the coordinator never dials a worker unless
    // for an export.
    info->set_address(absl::StrFormat("10.%d.%d.%d:7071", 1 + slot / 65536,
                                      (slot / 256) % 256, slot % 256));
    info->set_cores(1);
    info->set_memory_bytes(uint64_t{4} << 30);
    info->set_software_version(kGaslocVersion);
    info->set_hostname(absl::StrCat("sim-", slot));
    info->set_name(absl::StrCat("sim-", slot, "-", w.generation));
    Start();
  }
  Send(stub, &v1::Coordinator::Stub::async::RegisterWorker, call,
       kCallDeadline, [this, call, slot](grpc::Status status) {
        const bool ok = Record(kRegister, call->start, status);
        uint64_t generation = 0;
        {
          absl::MutexLock lock(&mu_);
          --outstanding_;
          if (ok) {
            Worker& w = workers_[slot];
            w.id = call->response.worker_id();
            w.job = 0;
            w.after_round = -1;
            w.members_job = 0;  // a new worker process: an empty roster
            w.members_epoch = 0;
            generation = w.generation;
            ++joins_;
            if (call->response.lease_ms() > 0)
              heartbeat_every_ = absl::Milliseconds(call->response.lease_ms()) / 3;
          }
        }
        if (!ok) {  // try again in a second
          timers_.At(clock_.Now() + absl::Seconds(1),
                     [this, slot] { Register(slot); });
          return;
        }
        Poll(slot, generation);
        timers_.At(clock_.Now() + HeartbeatEvery(),
                   [this, slot, generation] { Heartbeat(slot, generation); });
      });
}

void Fleet::Heartbeat(int slot, uint64_t generation) {
  auto call =
      std::make_shared<Call<v1::HeartbeatRequest, v1::HeartbeatResponse>>();
  v1::Coordinator::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    const Worker& w = workers_[slot];
    if (stopping_ || w.generation != generation || w.id == 0) return;
    stub = w.stub;
    call->request.set_worker_id(w.id);
    call->request.set_name(absl::StrCat("sim-", slot, "-", w.generation));
    v1::WorkerProgress* p = call->request.mutable_progress();
    p->set_job_id(w.job);
    p->set_round(w.round);
    p->set_total_inner_steps(w.total_steps);
    p->set_train_loss(3.0f);
    p->set_steps_per_second(static_cast<float>(w.steps_per_second));
    p->set_tokens_per_second(static_cast<float>(w.steps_per_second * 512));
    p->set_link_bytes_per_second(3e6f);
    p->set_tokens(w.total_steps * 512);
    p->set_activity(w.job == 0 ? v1::WORKER_ACTIVITY_IDLE
                               : v1::WORKER_ACTIVITY_TRAINING);
    Start();
  }
  Send(stub, &v1::Coordinator::Stub::async::Heartbeat, call, kCallDeadline,
       [this, call, slot, generation](grpc::Status status) {
        Record(kHeartbeat, call->start, status);
        Finish();
        timers_.At(clock_.Now() + HeartbeatEvery(),
                   [this, slot, generation] { Heartbeat(slot, generation); });
      });
}

void Fleet::Poll(int slot, uint64_t generation) {
  auto call =
      std::make_shared<Call<v1::GetAssignmentRequest, v1::Assignment>>();
  v1::Coordinator::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    const Worker& w = workers_[slot];
    if (stopping_ || w.generation != generation) return;
    stub = w.stub;
    call->request.set_worker_id(w.id);
    call->request.set_job_id(w.job);
    call->request.set_after_round(w.after_round);
    call->request.set_wait_ms(options_.wait_ms);
    call->request.set_members_job_id(w.members_job);
    call->request.set_members_epoch(w.members_epoch);
    polls_.insert(&call->context);
    Start();
  }
  Send(stub, &v1::Coordinator::Stub::async::GetAssignment, call,
       absl::Milliseconds(options_.wait_ms) + kCallDeadline,
       [this, call, slot, generation](grpc::Status status) {
        const absl::Time now = clock_.Now();
        const v1::Assignment& a = call->response;
        bool ok = status.ok();
        std::function<void()> next;
        {
          absl::MutexLock lock(&mu_);
          polls_.erase(&call->context);
          --outstanding_;
          Worker& w = workers_[slot];
          // An expired long poll (NONE) is counted, not timed.
          const bool none = ok && a.kind() == v1::ASSIGNMENT_KIND_NONE;
          RecordLocked(kGetAssignment,
                       absl::ToDoubleMilliseconds(now - call->start), status,
                       /*timed=*/!none);
          if (none) ++empty_polls_;
          if (stopping_ || w.generation != generation) return;
          if (!ok) {
            next = [this, slot, generation] { Poll(slot, generation); };
          } else if (a.kind() == v1::ASSIGNMENT_KIND_ROUND) {
            // Delivered since the round could be planned.
            const auto before = last_report_.find(a.round() - 1);
            const absl::Time ready =
                a.round() == 0 || before == last_report_.end()
                    ? job_started_
                    : before->second;
            const double delivery_ms =
                std::max(0.0, absl::ToDoubleMilliseconds(now - ready));
            if (a.round() == 0)
              first_delivery_ms_.push_back(delivery_ms);
            else if (before != last_report_.end())
              delivery_ms_.push_back(delivery_ms);
            highest_round_ = std::max<uint64_t>(highest_round_, a.round());
            w.job = a.job_id();
            w.round = a.round();
            if (a.members_size() > 0) {
              w.members_job = a.job_id();
              w.members_epoch = a.members_epoch();
            }
            w.peers.clear();
            for (const auto& p : a.peers()) w.peers.push_back(p.worker_id());
            for (const auto& p : a.ring_order())
              if (p.worker_id() != w.id) w.peers.push_back(p.worker_id());
            const uint32_t steps = std::max<uint32_t>(1, a.local_steps());
            const double seconds = steps / w.steps_per_second;
            const uint64_t job = a.job_id(), round = a.round();
            timers_.At(now + absl::Seconds(seconds),
                       [this, slot, generation, job, round, steps, seconds] {
                         Report(slot, generation, job, round, steps, seconds);
                       });
          } else {
            if (a.kind() == v1::ASSIGNMENT_KIND_STOP) {
              w.job = 0;
              w.after_round = -1;
            }
            next = [this, slot, generation] { Poll(slot, generation); };
          }
        }
        if (next) {
          if (ok) {
            next();
          } else {
            timers_.At(now + absl::Seconds(1), std::move(next));
          }
        }
      });
}

void Fleet::Report(int slot, uint64_t generation, uint64_t job,
                   uint64_t round, uint32_t steps, double seconds) {
  auto call =
      std::make_shared<Call<v1::ReportRoundRequest, v1::ReportRoundResponse>>();
  v1::Coordinator::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    Worker& w = workers_[slot];
    if (stopping_ || w.generation != generation) return;
    stub = w.stub;
    w.total_steps += steps;
    v1::ReportRoundRequest& r = call->request;
    r.set_worker_id(w.id);
    r.set_job_id(job);
    r.set_round(round);
    r.set_inner_steps(steps);
    r.set_compute_seconds(seconds);
    // A 0.55 MB copy each way per peer at about 24 Mbit/s.
    constexpr uint64_t kCopyBytes = 550000;
    constexpr double kWireSeconds = 0.18;
    r.set_exchange_seconds(kWireSeconds + 0.02);
    r.set_wire_seconds(kWireSeconds);
    r.set_wait_seconds(0.02);
    r.set_bytes_sent(kCopyBytes * w.peers.size());
    r.set_bytes_received(kCopyBytes * w.peers.size());
    for (uint64_t peer : w.peers) {
      v1::LinkSample* sample = r.add_link_samples();
      sample->set_peer_id(peer);
      sample->set_bytes(kCopyBytes);
      sample->set_wire_seconds(kWireSeconds);
    }
    r.set_train_loss(static_cast<float>(3.0 / std::sqrt(1.0 + round)));
    r.set_tokens(uint64_t{steps} * 512);
    r.set_peer_distance(0.1f);
    r.set_outcome(v1::ROUND_OUTCOME_COMPLETED);
    r.set_round_seconds(seconds + kWireSeconds + 0.02);
    Start();
  }
  Send(stub, &v1::Coordinator::Stub::async::ReportRound, call, kCallDeadline,
       [this, call, slot, generation, round](grpc::Status status) {
        const bool ok = Record(kReportRound, call->start, status);
        {
          absl::MutexLock lock(&mu_);
          --outstanding_;
          if (ok) {
            ++reports_;
            absl::Time& last = last_report_[round];
            last = std::max(last, clock_.Now());
          }
          // Refused or not, the worker moves on past the round.
          Worker& w = workers_[slot];
          if (w.generation == generation) w.after_round = round;
        }
        // A refused report is not retried: the worker asks for its next
        // round, as a daemon whose report was refused does.
        Poll(slot, generation);
      });
}

void Fleet::Leave(int slot) {
  auto call =
      std::make_shared<Call<v1::LeaveWorkerRequest, v1::LeaveWorkerResponse>>();
  v1::Coordinator::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    Worker& w = workers_[slot];
    if (stopping_ || w.id == 0) return;
    stub = w.stub;
    call->request.set_worker_id(w.id);
    call->request.set_reason("simulated churn");
    // Its timers and its long poll's answer are ignored from now on.
    ++w.generation;
    w.id = 0;
    Start();
  }
  Send(stub, &v1::Coordinator::Stub::async::LeaveWorker, call, kCallDeadline,
       [this, call, slot](grpc::Status status) {
        if (Record(kLeave, call->start, status)) {
          absl::MutexLock lock(&mu_);
          ++leaves_;
        }
        Finish();
        timers_.At(clock_.Now() + absl::Seconds(1),
                   [this, slot] { Register(slot); });
      });
}

void Fleet::Churn() {
  int slot;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    std::uniform_int_distribution<int> pick(0, options_.workers - 1);
    slot = pick(random_);
  }
  Leave(slot);
  timers_.At(clock_.Now() + absl::Seconds(60.0 / options_.churn_per_minute),
             [this] { Churn(); });
}

absl::StatusOr<v1::JobStatus> Fleet::GetJob(uint64_t job_id) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(clock_.Now() + kCallDeadline));
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  const grpc::Status status =
      operator_stub_->GetJob(&context, request, &response);
  if (!status.ok())
    return absl::UnavailableError(
        absl::StrCat("GetJob: ", status.error_message()));
  return response.job();
}

absl::Status Fleet::Connect() {
  if (options_.workers < 1 || options_.workers > 100000)
    return absl::InvalidArgumentError(
        absl::StrCat("workers must be in [1, 100000], got ", options_.workers));
  if (options_.workers_per_connection < 1)
    return absl::InvalidArgumentError("workers_per_connection must be >= 1");
  if (!(options_.min_steps_per_second > 0) ||
      options_.max_steps_per_second < options_.min_steps_per_second)
    return absl::InvalidArgumentError(
        "steps per second: need 0 < min <= max");
  // One channel per connection: a local subchannel pool, so channels to
  // the same address do not share a connection.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const int connections =
      (options_.workers + options_.workers_per_connection - 1) /
      options_.workers_per_connection;
  for (int c = 0; c < connections; ++c) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(options_.coordinator, options_.worker_credentials, args);
    if (!channel.ok()) return channel.status();
    stubs_.push_back(v1::Coordinator::NewStub(*channel));
    channels_.push_back(*std::move(channel));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> control =
      MakeChannel(options_.coordinator, options_.operator_credentials);
  if (!control.ok()) return control.status();
  operator_stub_ = v1::Coordinator::NewStub(*control);
  absl::MutexLock lock(&mu_);
  workers_.resize(options_.workers);
  for (int i = 0; i < options_.workers; ++i)
    workers_[i].stub = stubs_[i / options_.workers_per_connection].get();
  GASLOC_LOG(INFO) << "fleet: " << options_.workers << " simulated workers on "
                   << connections << " connection(s)";
  return absl::OkStatus();
}

absl::Status Fleet::RegisterAll() {
  // Registrations spread over two seconds.
  const absl::Time begin = clock_.Now();
  for (int i = 0; i < options_.workers; ++i)
    timers_.At(begin + absl::Seconds(2.0 * i / options_.workers),
               [this, i] { Register(i); });
  absl::MutexLock lock(&mu_);
  auto all_joined = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return joins_ >= static_cast<uint64_t>(options_.workers);
  };
  mu_.AwaitWithTimeout(absl::Condition(&all_joined), absl::Seconds(60));
  if (all_joined()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "only ", joins_, " of ", options_.workers,
      " simulated workers registered within 60 s; first error: ",
      first_error_[kRegister]));
}

absl::Status Fleet::StartJob() {
  v1::StartJobRequest start;
  v1::JobSpec& spec = *start.mutable_spec();
  spec.set_name("simulated-fleet");
  spec.mutable_model()->set_layers(1);
  spec.mutable_model()->set_d_model(32);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_context(32);
  spec.mutable_data()->set_corpus_path("/simulated/corpus.txt");
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_local_steps(options_.local_steps);
  spec.mutable_exchange()->set_deadline_ms(30000);
  spec.mutable_stop()->set_max_wall_seconds(
      absl::ToInt64Seconds(options_.duration) + 600);
  // Churn may take members away: the job needs half of the fleet.
  spec.set_min_workers(std::max(1, options_.workers / 2));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(clock_.Now() + kCallDeadline));
  v1::StartJobResponse response;
  const absl::Time sent = clock_.Now();
  const grpc::Status status =
      operator_stub_->StartJob(&context, start, &response);
  Record(kStartJob, sent, status);
  if (!status.ok())
    return absl::FailedPreconditionError(
        absl::StrCat("StartJob refused: ", status.error_message()));
  job_id_ = response.job().job_id();
  absl::MutexLock lock(&mu_);
  job_started_ = clock_.Now();
  return absl::OkStatus();
}

void Fleet::RunFor(absl::Duration duration) {
  const absl::Time started = clock_.Now();
  GASLOC_LOG(INFO) << "fleet: job " << job_id_ << " started; running for "
                   << duration;
  if (options_.churn_per_minute > 0)
    timers_.At(started + absl::Seconds(60.0 / options_.churn_per_minute),
               [this] { Churn(); });
  // Progress every 10 s.
  for (absl::Time t = started + absl::Seconds(10); t < started + duration;
       t += absl::Seconds(10)) {
    clock_.SleepUntil(t);
    absl::MutexLock lock(&mu_);
    GASLOC_LOG(INFO) << "fleet: " << absl::ToInt64Seconds(t - started)
                     << " s: round " << highest_round_ << ", " << reports_
                     << " reports, " << leaves_ << " left";
  }
  clock_.SleepUntil(started + duration);
}

void Fleet::StopAll() {
  {
    // No new calls, the open long polls cancelled, the rest awaited.
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (grpc::ClientContext* context : polls_) context->TryCancel();
    auto drained = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return outstanding_ == 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(40));
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(clock_.Now() + kCallDeadline));
  v1::StopJobRequest request;
  request.set_job_id(job_id_);
  request.set_reason("simulated fleet done");
  v1::StopJobResponse response;
  const grpc::Status stopped =
      operator_stub_->StopJob(&context, request, &response);
  if (!stopped.ok())
    GASLOC_LOG(WARNING) << "fleet: StopJob " << job_id_ << ": "
                        << stopped.error_message();
}

FleetReport Fleet::Summary(const absl::StatusOr<v1::JobStatus>& job,
                           double seconds) {
  FleetReport report;
  report.job_id = job_id_;
  report.seconds = seconds;
  absl::MutexLock lock(&mu_);
  for (int m = 0; m < kMethods; ++m) {
    if (latencies_[m].empty() && errors_[m] == 0) continue;
    report.rpcs.push_back(Summarise(kMethodNames[m], latencies_[m],
                                    errors_[m], first_error_[m]));
  }
  report.assignment_delivery =
      Summarise("assignment delivery", delivery_ms_, 0, "");
  report.first_round_delivery =
      Summarise("first round delivery", first_delivery_ms_, 0, "");
  report.empty_polls = empty_polls_;
  report.highest_round_assigned = highest_round_;
  report.reports = reports_;
  report.joins = joins_;
  report.leaves = leaves_;
  if (job.ok()) {
    report.rounds_completed = job->rounds_completed();
    report.job_state = v1::JobState_Name(job->state());
    report.job_message = job->message();
  } else {
    report.job_state = "unknown";
    report.job_message = std::string(job.status().message());
  }
  return report;
}

absl::StatusOr<FleetReport> Fleet::Run() {
  if (absl::Status s = Connect(); !s.ok()) return s;
  if (absl::Status s = RegisterAll(); !s.ok()) return s;
  if (absl::Status s = StartJob(); !s.ok()) return s;
  const absl::Time started = clock_.Now();
  RunFor(options_.duration);
  const double seconds = absl::ToDoubleSeconds(clock_.Now() - started);
  // The job's state while the fleet still ran it, then the stop.
  const absl::StatusOr<v1::JobStatus> job = GetJob(job_id_);
  StopAll();
  return Summary(job, seconds);
}

void AppendSummary(const LatencySummary& s, std::string* out) {
  out->append("{\"name\": ");
  AppendJsonString(s.name, out);
  absl::StrAppendFormat(out,
                        ", \"calls\": %d, \"errors\": %d, \"p50_ms\": %.3f, "
                        "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"first_error\": ",
                        s.calls, s.errors, s.p50_ms, s.p99_ms, s.max_ms);
  AppendJsonString(s.first_error, out);
  out->append("}");
}

}  // namespace

absl::StatusOr<FleetReport> RunSimulatedFleet(const FleetOptions& options) {
  auto fleet = std::make_unique<Fleet>(options);
  absl::StatusOr<FleetReport> report = fleet->Run();
  // A call still in flight after the drain's wait (a coordinator that
  // stopped answering) would call back into the fleet: keep it alive.
  if (!fleet->Drained()) {
    GASLOC_LOG(WARNING) << "fleet: calls still in flight at the end; "
                           "leaving the fleet's memory to the process exit";
    static_cast<void>(fleet.release());
  }
  return report;
}

std::string FleetReportJson(const FleetReport& report) {
  std::string out = "{\"rpcs\": [";
  for (size_t i = 0; i < report.rpcs.size(); ++i) {
    if (i > 0) out.append(", ");
    AppendSummary(report.rpcs[i], &out);
  }
  out.append("], \"assignment_delivery\": ");
  AppendSummary(report.assignment_delivery, &out);
  out.append(", \"first_round_delivery\": ");
  AppendSummary(report.first_round_delivery, &out);
  absl::StrAppendFormat(
      &out,
      ", \"empty_polls\": %d, \"job_id\": %d, \"rounds_completed\": %d, "
      "\"highest_round_assigned\": %d, \"reports\": %d, \"joins\": %d, "
      "\"leaves\": %d, \"seconds\": %.3f, \"job_state\": ",
      report.empty_polls, report.job_id, report.rounds_completed,
      report.highest_round_assigned, report.reports, report.joins,
      report.leaves, report.seconds);
  AppendJsonString(report.job_state, &out);
  out.append(", \"job_message\": ");
  AppendJsonString(report.job_message, &out);
  out.append("}");
  return out;
}

}  // namespace gasloc
