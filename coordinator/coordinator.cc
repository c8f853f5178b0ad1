#include "coordinator/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace gasloc::coordinator {
namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_FINISHED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_STOPPED;
}

std::string IdList(const std::vector<uint64_t>& ids) {
  constexpr size_t kShown = 8;
  if (ids.size() <= kShown) return absl::StrJoin(ids, ",");
  std::vector<uint64_t> head(ids.begin(), ids.begin() + kShown);
  return absl::StrCat(absl::StrJoin(head, ","), ",... (", ids.size(), ")");
}

}  // namespace

std::optional<std::string> StopReason(const v1::JobSpec& spec,
                                      uint64_t next_round, uint64_t tokens,
                                      absl::Time started, absl::Time now) {
  const v1::StopCondition& stop = spec.stop();
  if (stop.max_rounds() > 0 && next_round >= stop.max_rounds())
    return absl::StrCat("reached max_rounds=", stop.max_rounds());
  if (stop.max_tokens() > 0 && tokens >= stop.max_tokens())
    return absl::StrCat("reached max_tokens=", stop.max_tokens(), " (",
                        tokens, " tokens)");
  if (stop.max_wall_seconds() > 0 &&
      now - started >= absl::Seconds(stop.max_wall_seconds()))
    return absl::StrCat("reached max_wall_seconds=", stop.max_wall_seconds());
  return std::nullopt;
}

double EstimateEtaSeconds(const v1::JobStatus& status, absl::Time now) {
  if (IsTerminal(status.state())) return 0;
  if (status.state() != v1::JOB_STATE_RUNNING || status.started_unix_ms() == 0)
    return -1;
  const double elapsed =
      absl::ToDoubleSeconds(now - absl::FromUnixMillis(status.started_unix_ms()));
  const v1::StopCondition& stop = status.spec().stop();
  double eta = std::numeric_limits<double>::infinity();
  if (stop.max_rounds() > 0 && status.rounds_completed() > 0) {
    const double left = static_cast<double>(stop.max_rounds()) -
                        static_cast<double>(status.rounds_completed());
    eta = std::min(eta, std::max(0.0, left) * elapsed /
                            static_cast<double>(status.rounds_completed()));
  }
  if (stop.max_tokens() > 0 && status.tokens() > 0) {
    const double left = static_cast<double>(stop.max_tokens()) -
                        static_cast<double>(status.tokens());
    eta = std::min(eta, std::max(0.0, left) * elapsed /
                            static_cast<double>(status.tokens()));
  }
  if (stop.max_wall_seconds() > 0)
    eta = std::min(eta, std::max(0.0, stop.max_wall_seconds() - elapsed));
  return std::isfinite(eta) ? eta : -1;
}

double ExchangeBytes(const v1::JobSpec& spec, uint32_t members) {
  const double bytes_per_param =
      spec.exchange().encoding() == v1::WIRE_ENCODING_BF16 ? 2.0 : 4.0;
  const double model_bytes =
      static_cast<double>(ModelParameterCount(spec.model())) * bytes_per_param;
  if (!IsGossipAlgorithm(spec.outer().algorithm()) ||
      spec.outer().topology() == v1::TOPOLOGY_COMPLETE) {
    if (members < 2) return 0;
    return model_bytes * 2.0 * (members - 1) / members;
  }
  switch (spec.outer().topology()) {
    case v1::TOPOLOGY_RANDOM_TWO_PEER:
    case v1::TOPOLOGY_RING:
      return 2 * model_bytes;
    default:
      return model_bytes;
  }
}

// ------------------------------------------------------------- lifecycle

Coordinator::Coordinator(CoordinatorOptions options,
                         std::unique_ptr<Store> store, const Clock* clock)
    : options_(options), clock_(clock), store_(std::move(store)) {}

Coordinator::~Coordinator() = default;

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, std::unique_ptr<Store> store,
    const Clock* clock) {
  if (options.lease <= absl::ZeroDuration())
    return absl::InvalidArgumentError("lease must be positive");
  std::unique_ptr<Coordinator> c(
      new Coordinator(options, std::move(store), clock));
  absl::MutexLock lock(&c->mu_);
  const absl::Time now = clock->Now();
  RETURN_IF_ERROR(c->Load(now));
  c->BeginTxn();
  c->TickLocked(now);
  RETURN_IF_ERROR(c->EndTxn());
  return c;
}

absl::Status Coordinator::Load(absl::Time now) {
  if (store_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<StoredWorker> workers, store_->LoadWorkers());
  for (StoredWorker& sw : workers) {
    next_worker_id_ = std::max(next_worker_id_, sw.worker_id + 1);
    WorkerRec w;
    w.stored = std::move(sw);
    if (w.stored.state == v1::WORKER_STATE_ALIVE) {
      // A fresh lease from restart time: workers keep their ids.
      w.lease_expiry = now + options_.lease;
      w.last_heartbeat = now;
      leases_.insert({w.lease_expiry, w.stored.worker_id});
      if (options_.metrics != nullptr)
        options_.metrics->RecordWorkerJoin("restored");
    }
    workers_.emplace(w.stored.worker_id, std::move(w));
  }
  ASSIGN_OR_RETURN(std::vector<StoredJob> jobs, store_->LoadJobs());
  for (StoredJob& sj : jobs) {
    const uint64_t id = sj.status.job_id();
    next_job_id_ = std::max(next_job_id_, id + 1);
    JobRec& job = jobs_[id];
    job.stored = std::move(sj);
    if (job.stored.status.state() != v1::JOB_STATE_RUNNING) continue;
    if (options_.metrics != nullptr) options_.metrics->BeginJob(id);
    ASSIGN_OR_RETURN(std::vector<StoredMember> members,
                     store_->LoadMembers(id));
    for (StoredMember& m : members) job.members[m.worker_id] = m;
    ASSIGN_OR_RETURN(std::vector<StoredEpoch> epochs, store_->LoadEpochs(id));
    for (StoredEpoch& e : epochs)
      job.epochs[e.epoch] = {e.epoch, e.first_round, std::move(e.members)};
    ASSIGN_OR_RETURN(std::vector<StoredRound> rounds,
                     store_->LoadRounds(id, 0));
    for (StoredRound& r : rounds) {
      RoundRec rec = MakeRoundRec(job, r.round, r.epoch, r.deadline_unix_ms);
      rec.budgets = std::move(r.budgets);
      job.next_round = r.round + 1;
      job.rounds[r.round] = std::move(rec);
    }
    GASLOC_LOG(INFO) << "job " << id << " resumed: " << job.next_round
                     << " rounds planned, "
                     << job.stored.status.rounds_completed()
                     << " completed, " << job.members.size() << " members";
  }
  // Bindings: a worker bound to a job that is not running is idle; a live
  // worker bound to a running job without a member row gets one.
  for (auto& [id, w] : workers_) {
    if (w.stored.state != v1::WORKER_STATE_ALIVE) {
      w.stored.job_id = 0;
      continue;
    }
    auto it = jobs_.find(w.stored.job_id);
    if (w.stored.job_id != 0 &&
        (it == jobs_.end() ||
         it->second.stored.status.state() != v1::JOB_STATE_RUNNING)) {
      w.stored.job_id = 0;
    }
    if (w.stored.job_id == 0) {
      idle_.insert(id);
    } else if (!it->second.members.count(id)) {
      StoredMember m;
      m.job_id = w.stored.job_id;
      m.worker_id = id;
      it->second.members[id] = m;
    }
  }
  for (auto& [id, job] : jobs_) {
    for (auto it = job.members.begin(); it != job.members.end();) {
      auto w = workers_.find(it->first);
      if (w == workers_.end() || w->second.stored.job_id != id) {
        it = job.members.erase(it);
      } else {
        Contribute(job, it->second, +1);
        ++it;
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------- persistence

void Coordinator::BeginTxn() {
  txn_error_ = absl::OkStatus();
  if (store_ != nullptr) Note(store_->Begin());
}

absl::Status Coordinator::EndTxn() {
  if (store_ != nullptr) {
    if (txn_error_.ok()) {
      Note(store_->Commit());
    } else {
      store_->Rollback();
    }
  }
  changed_.SignalAll();
  if (txn_error_.ok()) return absl::OkStatus();
  GASLOC_LOG(ERROR) << "database write failed: " << txn_error_;
  return absl::UnavailableError(
      absl::StrCat("coordinator database write failed: ", txn_error_.message()));
}

void Coordinator::Note(const absl::Status& s) {
  if (!s.ok() && txn_error_.ok()) txn_error_ = s;
}

void Coordinator::SaveWorker(const WorkerRec& w) {
  if (store_ != nullptr) Note(store_->PutWorker(w.stored));
}

void Coordinator::SaveJob(const JobRec& job) {
  if (store_ != nullptr) Note(store_->PutJob(job.stored));
}

void Coordinator::SaveMember(const StoredMember& m) {
  if (store_ != nullptr) Note(store_->PutMember(m));
}

// ----------------------------------------------------------- membership

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  BeginTxn();
  TickLocked(clock_->Now());
  EndTxn().IgnoreError();
}

void Coordinator::TickLocked(absl::Time now) {
  ExpireLeases(now);
  AssignIdleWorkers(now);
  CheckOrphans(now);
}

void Coordinator::ExpireLeases(absl::Time now) {
  while (!leases_.empty() && leases_.begin()->first <= now) {
    const auto [expiry, id] = *leases_.begin();
    leases_.erase(leases_.begin());
    WorkerRec& w = workers_.at(id);
    GASLOC_LOG(WARNING) << "worker " << id << " (" << w.stored.info.address()
                        << ") lease expired: dead";
    w.stored.state = v1::WORKER_STATE_DEAD;
    if (options_.metrics != nullptr)
      options_.metrics->RecordWorkerLeave("lease_expired");
    idle_.erase(id);
    ReleaseWorker(w, now);
    SaveWorker(w);
  }
}

void Coordinator::Renew(WorkerRec& w, absl::Time now) {
  leases_.erase({w.lease_expiry, w.stored.worker_id});
  w.lease_expiry = now + options_.lease;
  w.last_heartbeat = now;
  leases_.insert({w.lease_expiry, w.stored.worker_id});
}

void Coordinator::BindWorker(JobRec& job, WorkerRec& w) {
  const uint64_t id = w.stored.worker_id;
  idle_.erase(id);
  w.stored.job_id = job.stored.status.job_id();
  StoredMember m;
  m.job_id = w.stored.job_id;
  m.worker_id = id;
  job.members[id] = m;
  job.orphaned_since.reset();
  SaveWorker(w);
  SaveMember(m);
}

void Coordinator::ReleaseWorker(WorkerRec& w, absl::Time now) {
  const uint64_t job_id = w.stored.job_id;
  w.stored.job_id = 0;
  if (w.stored.state == v1::WORKER_STATE_ALIVE) idle_.insert(w.stored.worker_id);
  SaveWorker(w);
  if (job_id == 0) return;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobRec& job = it->second;
  auto member = job.members.find(w.stored.worker_id);
  if (member != job.members.end()) {
    // A member that finished the job keeps its last loss and bpb in the
    // job's means (the final bpb is every finisher's, not the last one's).
    if (!member->second.got_stop) Contribute(job, member->second, -1);
    job.members.erase(member);
  }
  if (store_ != nullptr)
    Note(store_->DeleteMember(job_id, w.stored.worker_id));
  if (job.stored.status.state() == v1::JOB_STATE_RUNNING) {
    UpdateProgress(job, now);
    MaybeFinish(job, now);
  }
}

void Coordinator::AssignIdleWorkers(absl::Time now) {
  bool pending_left = false;
  for (auto& [id, job] : jobs_) {
    v1::JobStatus& st = job.stored.status;
    if (st.state() != v1::JOB_STATE_PENDING) continue;
    const uint32_t min_workers = st.spec().min_workers();
    if (idle_.size() < min_workers) {
      const std::string message =
          absl::StrCat("waiting for ", min_workers, " idle workers (",
                       idle_.size(), " available)");
      if (st.message() != message) {
        st.set_message(message);
        SaveJob(job);
      }
      pending_left = true;
      continue;
    }
    const uint32_t max_workers = st.spec().max_workers();
    std::vector<uint64_t> taken;
    for (uint64_t wid : idle_) {
      if (max_workers > 0 && taken.size() >= max_workers) break;
      taken.push_back(wid);
    }
    for (uint64_t wid : taken) BindWorker(job, workers_.at(wid));
    st.set_state(v1::JOB_STATE_RUNNING);
    st.set_started_unix_ms(UnixMs(now));
    if (options_.metrics != nullptr) options_.metrics->BeginJob(id);
    st.set_message(absl::StrCat("running with ", taken.size(), " workers"));
    SaveJob(job);
    GASLOC_LOG(INFO) << "job " << id << " (" << st.spec().name()
                     << ") RUNNING with workers " << IdList(taken);
    AddEvent(job, v1::JOB_EVENT_KIND_STATE,
             absl::StrCat("job running with workers ", IdList(taken)), now);
  }
  // Idle workers are kept for pending jobs; otherwise they join running
  // jobs below max_workers at those jobs' next planned round.
  if (pending_left) return;
  for (auto& [id, job] : jobs_) {
    if (idle_.empty()) break;
    const v1::JobStatus& st = job.stored.status;
    if (st.state() != v1::JOB_STATE_RUNNING || job.stored.stop_round >= 0)
      continue;
    const uint32_t max_workers = st.spec().max_workers();
    while (!idle_.empty() &&
           (max_workers == 0 || job.members.size() < max_workers)) {
      WorkerRec& w = workers_.at(*idle_.begin());
      GASLOC_LOG(INFO) << "worker " << w.stored.worker_id << " joins job "
                       << id << " from round " << job.next_round;
      BindWorker(job, w);
    }
  }
}

void Coordinator::CheckOrphans(absl::Time now) {
  for (auto& [id, job] : jobs_) {
    if (job.stored.status.state() != v1::JOB_STATE_RUNNING) continue;
    if (!job.members.empty()) {
      job.orphaned_since.reset();
      continue;
    }
    if (!job.orphaned_since) job.orphaned_since = now;
    if (now - *job.orphaned_since >= options_.orphan_timeout) {
      EndJob(job, v1::JOB_STATE_FAILED,
             absl::StrCat("no live worker for ",
                          absl::FormatDuration(options_.orphan_timeout)),
             now);
    }
  }
}

absl::StatusOr<Coordinator::WorkerRec*> Coordinator::LiveWorker(
    uint64_t worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end())
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, " is not registered"));
  WorkerRec& w = it->second;
  if (w.stored.state == v1::WORKER_STATE_DEAD)
    return absl::NotFoundError(absl::StrCat(
        "worker ", worker_id, " is dead (its lease expired); register again"));
  if (w.stored.state == v1::WORKER_STATE_LEFT)
    return absl::NotFoundError(absl::StrCat(
        "worker ", worker_id, " has left; register again"));
  return &w;
}

absl::StatusOr<Coordinator::JobRec*> Coordinator::FindJob(uint64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end())
    return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return &it->second;
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  const v1::WorkerInfo& info = request.info();
  if (info.address().empty())
    return absl::InvalidArgumentError("info.address is required (host:port)");
  if (info.cores() < 1 || info.cores() > 4096)
    return absl::InvalidArgumentError(
        absl::StrCat("info.cores must be in [1, 4096], got ", info.cores()));
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  const uint64_t id = next_worker_id_++;
  WorkerRec& w = workers_[id];
  w.stored.worker_id = id;
  w.stored.info = info;
  w.stored.registered_unix_ms = UnixMs(now);
  w.stored.state = v1::WORKER_STATE_ALIVE;
  Renew(w, now);
  idle_.insert(id);
  SaveWorker(w);
  if (options_.metrics != nullptr) options_.metrics->RecordWorkerJoin("registered");
  GASLOC_LOG(INFO) << "worker " << id << " registered: " << info.address()
                   << ", " << info.cores() << " cores, version "
                   << info.software_version();
  TickLocked(now);
  RETURN_IF_ERROR(EndTxn());
  v1::RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_lease_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.lease)));
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  TickLocked(now);
  auto w = LiveWorker(request.worker_id());
  if (!w.ok()) {
    EndTxn().IgnoreError();
    return w.status();
  }
  Renew(**w, now);
  (*w)->progress = request.progress();
  v1::HeartbeatResponse response;
  response.set_lease_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.lease)));
  // Abandon when the job the worker is running was stopped or failed.
  const uint64_t running = request.progress().job_id();
  if (running != 0) {
    auto it = jobs_.find(running);
    if (it != jobs_.end()) {
      const v1::JobState s = it->second.stored.status.state();
      response.set_abandon_job(s == v1::JOB_STATE_STOPPED ||
                               s == v1::JOB_STATE_FAILED);
    }
  }
  RETURN_IF_ERROR(EndTxn());
  return response;
}

absl::Status Coordinator::LeaveWorker(const v1::LeaveWorkerRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  auto w = LiveWorker(request.worker_id());
  if (!w.ok()) {
    EndTxn().IgnoreError();
    return w.status();
  }
  GASLOC_LOG(INFO) << "worker " << request.worker_id() << " left ("
                   << request.reason() << ")";
  leases_.erase({(*w)->lease_expiry, request.worker_id()});
  (*w)->stored.state = v1::WORKER_STATE_LEFT;
  if (options_.metrics != nullptr) options_.metrics->RecordWorkerLeave("left");
  idle_.erase(request.worker_id());
  ReleaseWorker(**w, now);
  TickLocked(now);
  return EndTxn();
}

v1::ListWorkersResponse Coordinator::ListWorkers(
    const v1::ListWorkersRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  TickLocked(now);
  EndTxn().IgnoreError();
  v1::ListWorkersResponse response;
  for (const auto& [id, w] : workers_) {
    if (!request.include_gone() && w.stored.state != v1::WORKER_STATE_ALIVE)
      continue;
    v1::WorkerStatus* s = response.add_workers();
    s->set_worker_id(id);
    *s->mutable_info() = w.stored.info;
    s->set_state(w.stored.state);
    *s->mutable_progress() = w.progress;
    if (w.stored.state == v1::WORKER_STATE_ALIVE)
      s->set_heartbeat_age_ms(
          static_cast<uint64_t>(absl::ToInt64Milliseconds(now - w.last_heartbeat)));
    s->set_registered_unix_ms(w.stored.registered_unix_ms);
    auto job = jobs_.find(w.stored.job_id);
    if (job != jobs_.end()) {
      auto m = job->second.members.find(id);
      if (m != job->second.members.end())
        s->set_local_steps(m->second.local_steps);
    }
  }
  return response;
}

// ----------------------------------------------------------------- jobs

absl::StatusOr<v1::JobStatus> Coordinator::StartJob(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  const uint64_t id = next_job_id_++;
  JobRec& job = jobs_[id];
  v1::JobStatus& st = job.stored.status;
  st.set_job_id(id);
  *st.mutable_spec() = ApplyJobSpecDefaults(spec);
  st.set_state(v1::JOB_STATE_PENDING);
  st.set_created_unix_ms(UnixMs(now));
  st.set_message("pending");
  SaveJob(job);
  GASLOC_LOG(INFO) << "job " << id << " (" << spec.name() << ") accepted";
  AddEvent(job, v1::JOB_EVENT_KIND_STATE, "job accepted (PENDING)", now);
  TickLocked(now);
  RETURN_IF_ERROR(EndTxn());
  return StatusOf(job, now);
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  TickLocked(now);
  EndTxn().IgnoreError();
  ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
  return StatusOf(*job, now);
}

v1::ListJobsResponse Coordinator::ListJobs() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  TickLocked(now);
  EndTxn().IgnoreError();
  v1::ListJobsResponse response;
  for (const auto& [id, job] : jobs_) *response.add_jobs() = StatusOf(job, now);
  return response;
}

absl::StatusOr<v1::JobStatus> Coordinator::StopJob(uint64_t job_id,
                                                   const std::string& reason) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
  const v1::JobState state = job->stored.status.state();
  if (IsTerminal(state))
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is already ", v1::JobState_Name(state)));
  BeginTxn();
  EndJob(*job, v1::JOB_STATE_STOPPED,
         absl::StrCat("stopped: ", reason.empty() ? "StopJob" : reason), now);
  TickLocked(now);
  RETURN_IF_ERROR(EndTxn());
  return StatusOf(*job, now);
}

void Coordinator::EndJob(JobRec& job, v1::JobState state,
                         const std::string& message, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  if (options_.metrics != nullptr && st.state() == v1::JOB_STATE_RUNNING)
    options_.metrics->EndJob(st.job_id());
  st.set_state(state);
  st.set_message(message);
  st.set_ended_unix_ms(UnixMs(now));
  std::vector<uint64_t> ids;
  for (const auto& [wid, m] : job.members) ids.push_back(wid);
  for (uint64_t wid : ids) ReleaseWorker(workers_.at(wid), now);
  job.rounds.clear();
  job.epochs.clear();
  if (store_ != nullptr) Note(store_->PruneRounds(st.job_id(), job.next_round));
  SaveJob(job);
  GASLOC_LOG(INFO) << "job " << st.job_id() << " " << v1::JobState_Name(state)
                   << ": " << message;
  AddEvent(job, v1::JOB_EVENT_KIND_STATE,
           absl::StrCat(v1::JobState_Name(state), ": ", message), now);
}

void Coordinator::MaybeFinish(JobRec& job, absl::Time now) {
  if (job.stored.status.state() != v1::JOB_STATE_RUNNING ||
      job.stored.stop_round < 0)
    return;
  for (const auto& [wid, m] : job.members) {
    if (!m.got_stop && m.last_reported_round + 1 < job.stored.stop_round)
      return;
  }
  absl::string_view reason = job.stored.status.message();
  absl::ConsumePrefix(&reason, "finishing: ");
  EndJob(job, v1::JOB_STATE_FINISHED, absl::StrCat("finished: ", reason), now);
}

void Coordinator::Contribute(JobRec& job, const StoredMember& m, int sign) {
  if (m.first_round < 0) return;  // joined, not in a round yet
  const int64_t progress = std::max(m.last_reported_round + 1, m.first_round);
  if (sign > 0) {
    ++job.progress_counts[progress];
  } else {
    auto it = job.progress_counts.find(progress);
    if (it != job.progress_counts.end() && --it->second == 0)
      job.progress_counts.erase(it);
  }
  if (m.last_reported_round >= 0) {
    job.loss_sum += sign * static_cast<double>(m.train_loss);
    job.loss_n += sign;
  }
  if (m.val_bpb > 0) {
    job.bpb_sum += sign * static_cast<double>(m.val_bpb);
    job.bpb_n += sign;
  }
}

void Coordinator::UpdateProgress(JobRec& job, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  if (!job.progress_counts.empty()) {
    const auto completed =
        static_cast<uint64_t>(job.progress_counts.begin()->first);
    if (completed > st.rounds_completed()) {
      st.set_rounds_completed(completed);
      AddEvent(job, v1::JOB_EVENT_KIND_ROUND,
               absl::StrCat("round ", completed - 1, " completed"), now);
    }
  }
  if (job.loss_n > 0)
    st.set_train_loss(static_cast<float>(job.loss_sum / job.loss_n));
  if (job.bpb_n > 0) st.set_val_bpb(static_cast<float>(job.bpb_sum / job.bpb_n));
}

void Coordinator::AddEvent(JobRec& job, v1::JobEventKind kind,
                           const std::string& description, absl::Time now) {
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_unix_ms(UnixMs(now));
  *event.mutable_job() = StatusOf(job, now);
  event.set_description(description);
  job.events.emplace_back(++event_seq_, std::move(event));
  while (job.events.size() > options_.events_kept) job.events.pop_front();
}

v1::JobStatus Coordinator::StatusOf(const JobRec& job, absl::Time now) const {
  v1::JobStatus st = job.stored.status;
  st.set_eta_seconds(EstimateEtaSeconds(st, now));
  return st;
}

// -------------------------------------------------------------- rounds

const Coordinator::EpochRec* Coordinator::EpochOf(const JobRec& job,
                                                  uint64_t epoch) {
  auto it = job.epochs.find(epoch);
  return it == job.epochs.end() ? nullptr : &it->second;
}

Coordinator::RoundRec Coordinator::MakeRoundRec(const JobRec& job,
                                                uint64_t round, uint64_t epoch,
                                                int64_t deadline_unix_ms) const {
  RoundRec rec;
  rec.round = round;
  rec.epoch = epoch;
  rec.deadline_unix_ms = deadline_unix_ms;
  const EpochRec* e = EpochOf(job, epoch);
  const uint32_t n = e == nullptr ? 0 : static_cast<uint32_t>(e->members.size());
  const v1::JobSpec& spec = job.stored.status.spec();
  ScheduleKey key;
  key.seed = spec.training().seed();
  key.round = round;
  key.epoch = epoch;
  key.topology = IsGossipAlgorithm(spec.outer().algorithm())
                     ? spec.outer().topology()
                     : v1::TOPOLOGY_COMPLETE;
  rec.schedule = PlanSchedule(key, n);
  return rec;
}

void Coordinator::PlanNextRound(JobRec& job, absl::Time now) {
  // Planning time is a measurement, not a decision: the real monotonic
  // clock, not clock_.
  const auto planning_start = std::chrono::steady_clock::now();
  v1::JobStatus& st = job.stored.status;
  const uint64_t r = job.next_round;
  if (auto reason = StopReason(st.spec(), r, st.tokens(),
                               absl::FromUnixMillis(st.started_unix_ms()), now)) {
    job.stored.stop_round = static_cast<int64_t>(r);
    st.set_message(absl::StrCat("finishing: ", *reason));
    SaveJob(job);
    GASLOC_LOG(INFO) << "job " << st.job_id() << " stops before round " << r
                     << ": " << *reason;
    MaybeFinish(job, now);
    return;
  }
  std::vector<uint64_t> ids;
  ids.reserve(job.members.size());
  for (const auto& [wid, m] : job.members) ids.push_back(wid);

  // Epoch: bumps when the members differ from the previous round's.
  const EpochRec* last = job.epochs.empty() ? nullptr : &job.epochs.rbegin()->second;
  uint64_t epoch = last == nullptr ? 0 : last->epoch;
  if (last == nullptr || last->members != ids) {
    std::vector<uint64_t> joined, left;
    if (last != nullptr) {
      std::set_difference(ids.begin(), ids.end(), last->members.begin(),
                          last->members.end(), std::back_inserter(joined));
      std::set_difference(last->members.begin(), last->members.end(),
                          ids.begin(), ids.end(), std::back_inserter(left));
    } else {
      joined = ids;
    }
    ++epoch;
    job.epochs[epoch] = {epoch, r, ids};
    if (store_ != nullptr) Note(store_->PutEpoch({st.job_id(), epoch, r, ids}));
    const std::string what = absl::StrCat(
        "epoch ", epoch, " from round ", r, ": ", ids.size(), " workers",
        joined.empty() ? "" : absl::StrCat(", joined ", IdList(joined)),
        left.empty() ? "" : absl::StrCat(", left ", IdList(left)));
    GASLOC_LOG(INFO) << "job " << st.job_id() << " " << what;
    st.set_epoch(epoch);
    st.clear_worker_ids();
    for (uint64_t id : ids) st.add_worker_ids(id);
    AddEvent(job, v1::JOB_EVENT_KIND_MEMBERSHIP, what, now);
  }

  // Budgets.
  std::vector<WorkerRates> rates;
  rates.reserve(ids.size());
  for (const auto& [wid, m] : job.members)
    rates.push_back({m.steps_per_second, m.bytes_per_second});
  BudgetOptions bo;
  bo.policy = st.spec().outer().budget_policy();
  bo.nominal_steps = st.spec().outer().local_steps();
  bo.min_steps = st.spec().outer().min_local_steps();
  bo.exchange_bytes = ExchangeBytes(st.spec(), static_cast<uint32_t>(ids.size()));
  BudgetPlan plan = PlanBudgets(rates, bo);

  const int64_t deadline =
      UnixMs(now + absl::Seconds(plan.target_round_seconds) +
             absl::Milliseconds(st.spec().exchange().deadline_ms()));
  RoundRec rec = MakeRoundRec(job, r, epoch, deadline);
  std::vector<std::string> changes;
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
      if (m.local_steps != 0) {
        const std::string reason = b.Reason();
        v1::BudgetChange* c = st.add_budget_changes();
        c->set_worker_id(wid);
        c->set_round(r);
        c->set_old_local_steps(m.local_steps);
        c->set_new_local_steps(b.local_steps);
        c->set_reason(reason);
        if (options_.metrics != nullptr)
          options_.metrics->RecordBudgetChange(st.job_id(), b);
        GASLOC_LOG(INFO) << "job " << st.job_id() << " round " << r
                         << ": worker " << wid << " H " << m.local_steps
                         << " -> " << b.local_steps << " (" << reason << ")";
        changes.push_back(absl::StrCat("worker ", wid, " H ", m.local_steps,
                                       " -> ", b.local_steps));
      }
      m.local_steps = b.local_steps;
      dirty = true;
    }
    if (dirty) SaveMember(m);
  }
  rec.budgets = std::move(plan.budgets);
  const int excess = st.budget_changes_size() - options_.max_budget_changes;
  if (excess > 0) st.mutable_budget_changes()->DeleteSubrange(0, excess);

  if (store_ != nullptr) {
    StoredRound sr;
    sr.job_id = st.job_id();
    sr.round = r;
    sr.epoch = epoch;
    sr.planned_unix_ms = UnixMs(now);
    sr.deadline_unix_ms = deadline;
    sr.budgets = std::move(rec.budgets);  // lent to the store, no copy
    Note(store_->PutRound(sr));
    rec.budgets = std::move(sr.budgets);
  }
  job.rounds[r] = std::move(rec);
  job.next_round = r + 1;
  st.set_round_planned(r);
  // Forget rounds (and epochs) older than the window kept.
  if (r + 1 > options_.rounds_kept) {
    const uint64_t oldest = r + 1 - options_.rounds_kept;
    while (!job.rounds.empty() && job.rounds.begin()->first < oldest)
      job.rounds.erase(job.rounds.begin());
    if (store_ != nullptr && oldest % 16 == 0)
      Note(store_->PruneRounds(st.job_id(), oldest));
    const uint64_t oldest_epoch = job.rounds.begin()->second.epoch;
    while (job.epochs.begin()->first < oldest_epoch)
      job.epochs.erase(job.epochs.begin());
  }
  SaveJob(job);
  if (options_.metrics != nullptr)
    options_.metrics->RecordRoundPlanned(
        st.job_id(), std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - planning_start)
                         .count());
  if (!changes.empty()) {
    AddEvent(job, v1::JOB_EVENT_KIND_BUDGET,
             absl::StrCat("round ", r, ": ", changes.size(),
                          " budget change(s): ",
                          absl::StrJoin(changes.begin(),
                                        changes.begin() + std::min<size_t>(
                                                              changes.size(), 4),
                                        "; ")),
             now);
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
                                            uint64_t worker_id) const {
  const v1::JobSpec& spec = job.stored.status.spec();
  const EpochRec* epoch = EpochOf(job, round.epoch);
  const std::vector<uint64_t>& members = epoch->members;
  const auto pos = std::lower_bound(members.begin(), members.end(), worker_id);
  const auto rank = static_cast<uint32_t>(pos - members.begin());
  const auto n = static_cast<uint32_t>(members.size());
  auto address = [&](uint64_t id) -> const std::string& {
    return workers_.at(id).stored.info.address();
  };

  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_ROUND);
  a.set_job_id(job.stored.status.job_id());
  *a.mutable_spec() = spec;
  a.set_round(round.round);
  a.set_epoch(round.epoch);
  a.set_rank(rank);
  a.set_num_workers(n);
  const bool gossip = IsGossipAlgorithm(spec.outer().algorithm());
  const bool complete = !gossip || spec.outer().topology() == v1::TOPOLOGY_COMPLETE;
  if (gossip) {
    // Complete graph: full averaging, alpha * lambda = 1/n on every edge.
    const float weight = complete ? 1.0f : spec.outer().lambda();
    a.set_alpha(complete ? 1.0f / static_cast<float>(n) : spec.outer().alpha());
    for (uint32_t j : round.schedule.PeersOf(rank)) {
      v1::PeerAssignment* p = a.add_peers();
      p->set_worker_id(members[j]);
      p->set_address(address(members[j]));
      p->set_weight(weight);
    }
  } else {
    a.set_alpha(1.0f / static_cast<float>(n));
  }
  if (complete) {
    for (uint64_t id : members) {
      v1::PeerAssignment* p = a.add_ring_order();
      p->set_worker_id(id);
      p->set_address(address(id));
      p->set_weight(1.0f / static_cast<float>(n));
    }
  }
  a.set_local_steps(round.budgets[rank].local_steps);
  a.set_budget_reason(round.budgets[rank].Reason());
  a.set_exchange_deadline_unix_ms(round.deadline_unix_ms);

  // A worker new to the job fetches the model from a member that was in the
  // previous round and is still in the job (the lowest id).
  auto m = job.members.find(worker_id);
  if (m != job.members.end() && m->second.first_round ==
                                    static_cast<int64_t>(round.round) &&
      round.round > 0) {
    auto prev = job.rounds.find(round.round - 1);
    if (prev != job.rounds.end()) {
      const EpochRec* pe = EpochOf(job, prev->second.epoch);
      for (uint64_t id : pe->members) {
        if (id == worker_id || !job.members.count(id)) continue;
        if (!std::binary_search(members.begin(), members.end(), id)) continue;
        v1::PeerAssignment* src = a.mutable_model_source();
        src->set_worker_id(id);
        src->set_address(address(id));
        src->set_weight(1.0f);
        break;
      }
    }
  }
  return a;
}

absl::StatusOr<std::optional<v1::Assignment>> Coordinator::TryAssign(
    const v1::GetAssignmentRequest& request, absl::Time now) {
  ASSIGN_OR_RETURN(WorkerRec * w, LiveWorker(request.worker_id()));
  Renew(*w, now);
  const uint64_t bound = w->stored.job_id;
  if (request.job_id() != 0 && request.job_id() != bound) {
    ASSIGN_OR_RETURN(JobRec * old, FindJob(request.job_id()));
    if (bound == 0) {
      const v1::JobStatus& st = old->stored.status;
      return StopAssignment(
          *old, IsTerminal(st.state())
                    ? absl::StrCat("job ", st.job_id(), " ",
                                   v1::JobState_Name(st.state()), ": ",
                                   st.message())
                    : absl::StrCat("worker ", w->stored.worker_id,
                                   " is no longer a member of job ",
                                   st.job_id(), " (", st.message(), ")"));
    }
  }
  if (bound == 0) return std::nullopt;
  JobRec& job = jobs_.at(bound);
  const int64_t after =
      request.job_id() == bound ? request.after_round() : int64_t{-1};
  const uint64_t next = static_cast<uint64_t>(after + 1);
  StoredMember& member = job.members.at(w->stored.worker_id);

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

  // The first planned round >= next that includes the worker.
  for (auto it = job.rounds.lower_bound(next); it != job.rounds.end(); ++it) {
    const EpochRec* e = EpochOf(job, it->second.epoch);
    if (std::binary_search(e->members.begin(), e->members.end(),
                           w->stored.worker_id))
      return BuildAssignment(job, it->second, w->stored.worker_id);
  }
  if (next < job.next_round && !job.rounds.empty() &&
      next < job.rounds.begin()->first && member.first_round >= 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "round ", next, " of job ", bound,
        " is no longer kept; ask for a later round"));
  // Nothing planned for the worker yet: plan the next round if it was in the
  // latest one (or nobody from it is still in the job); a new member waits
  // for the members to reach the round boundary.
  bool plan = job.rounds.empty();
  if (!plan) {
    const EpochRec* e = EpochOf(job, job.rounds.rbegin()->second.epoch);
    plan = std::binary_search(e->members.begin(), e->members.end(),
                              w->stored.worker_id);
    if (!plan) {
      plan = true;
      for (uint64_t id : e->members)
        if (job.members.count(id)) plan = false;
    }
  }
  if (!plan) return std::nullopt;
  PlanNextRound(job, now);
  // Deciding to stop may have finished the job (and released the worker).
  if (job.stored.status.state() != v1::JOB_STATE_RUNNING)
    return StopAssignment(job, job.stored.status.message());
  if (job.stored.stop_round >= 0 &&
      static_cast<int64_t>(next) >= job.stored.stop_round)
    return stop_now();
  return BuildAssignment(job, job.rounds.rbegin()->second, w->stored.worker_id);
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
  // Waiting is real time (a condition variable); decisions use the clock.
  const absl::Time give_up = absl::Now() + wait;
  absl::MutexLock lock(&mu_);
  while (true) {
    const absl::Time now = clock_->Now();
    BeginTxn();
    TickLocked(now);
    auto result = TryAssign(request, now);
    RETURN_IF_ERROR(EndTxn());
    if (!result.ok()) return result.status();
    if (result->has_value()) return std::move(**result);
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration() || (cancelled && cancelled())) break;
    // Wake on any change, and at least every 500 ms to re-check leases.
    changed_.WaitWithTimeout(&mu_, std::min(left, absl::Milliseconds(500)));
  }
  v1::Assignment none;
  none.set_kind(v1::ASSIGNMENT_KIND_NONE);
  none.set_job_id(request.job_id());
  return none;
}

absl::Status Coordinator::ReportRound(const v1::ReportRoundRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  BeginTxn();
  TickLocked(now);
  auto worker = LiveWorker(request.worker_id());
  if (!worker.ok()) {
    EndTxn().IgnoreError();
    return worker.status();
  }
  auto found = FindJob(request.job_id());
  if (!found.ok()) {
    EndTxn().IgnoreError();
    return found.status();
  }
  WorkerRec& w = **worker;
  JobRec& job = **found;
  Renew(w, now);
  v1::JobStatus& st = job.stored.status;
  // Late reports for a job that has ended change nothing.
  if (st.state() != v1::JOB_STATE_RUNNING) return EndTxn();
  auto mit = job.members.find(w.stored.worker_id);
  if (mit == job.members.end()) {
    EndTxn().IgnoreError();
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id(),
                     " is not a member of job ", request.job_id()));
  }
  if (request.round() >= job.next_round) {
    EndTxn().IgnoreError();
    return absl::InvalidArgumentError(absl::StrCat(
        "round ", request.round(), " of job ", request.job_id(),
        " was not planned (rounds planned: ", job.next_round, ")"));
  }
  StoredMember& m = mit->second;
  if (static_cast<int64_t>(request.round()) <= m.last_reported_round)
    return EndTxn();  // a duplicate
  Contribute(job, m, -1);
  m.last_reported_round = static_cast<int64_t>(request.round());
  if (request.inner_steps() > 0 && request.compute_seconds() > 0)
    m.steps_per_second =
        UpdateEma(m.steps_per_second,
                  request.inner_steps() / request.compute_seconds(),
                  options_.ema_weight);
  const uint64_t moved = std::max(request.bytes_sent(), request.bytes_received());
  if (moved > 0 && request.exchange_seconds() > 0)
    m.bytes_per_second =
        UpdateEma(m.bytes_per_second,
                  static_cast<double>(moved) / request.exchange_seconds(),
                  options_.ema_weight);
  if (request.val_bpb() > 0) m.val_bpb = request.val_bpb();
  m.train_loss = request.train_loss();
  Contribute(job, m, +1);
  st.set_tokens(st.tokens() + request.tokens());
  if (!request.failed_peers().empty())
    GASLOC_LOG(WARNING) << "job " << st.job_id() << " round "
                        << request.round() << ": worker "
                        << request.worker_id() << " lost peers "
                        << absl::StrJoin(request.failed_peers(), ",") << " ("
                        << request.failure_reason() << ")";
  SaveMember(m);
  UpdateProgress(job, now);
  if (!std::isfinite(request.train_loss())) {
    EndJob(job, v1::JOB_STATE_FAILED,
           absl::StrCat("worker ", request.worker_id(),
                        " reported a non-finite training loss (",
                        request.train_loss(), ") in round ", request.round()),
           now);
  } else {
    MaybeFinish(job, now);
  }
  SaveJob(job);
  TickLocked(now);
  return EndTxn();
}

// -------------------------------------------------------------- metrics

CoordinatorGaugeState Coordinator::GaugeState() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  CoordinatorGaugeState state;
  for (v1::JobState s : {v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                         v1::JOB_STATE_FINISHED, v1::JOB_STATE_FAILED,
                         v1::JOB_STATE_STOPPED})
    state.jobs_by_state[s] = 0;
  // Every live worker holds exactly one lease.
  state.live_workers.reserve(leases_.size());
  for (const auto& [expiry, id] : leases_)
    state.live_workers.push_back(
        {id, absl::ToDoubleSeconds(now - workers_.at(id).last_heartbeat)});
  std::sort(state.live_workers.begin(), state.live_workers.end(),
            [](const auto& a, const auto& b) { return a.worker_id < b.worker_id; });
  for (const auto& [id, job] : jobs_) {
    const v1::JobState s = job.stored.status.state();
    ++state.jobs_by_state[s];
    if (s == v1::JOB_STATE_PENDING || s == v1::JOB_STATE_RUNNING)
      state.active_jobs.push_back({id, job.stored.status.epoch(),
                                   static_cast<uint32_t>(job.members.size())});
  }
  return state;
}

// ---------------------------------------------------------------- watch

absl::StatusOr<std::pair<v1::JobEvent, uint64_t>> Coordinator::WatchSnapshot(
    uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
  v1::JobEvent event;
  event.set_kind(v1::JOB_EVENT_KIND_SNAPSHOT);
  event.set_unix_ms(UnixMs(now));
  *event.mutable_job() = StatusOf(*job, now);
  event.set_description(absl::StrCat(
      "job ", job_id, " ", v1::JobState_Name(job->stored.status.state())));
  return std::make_pair(std::move(event), event_seq_);
}

absl::StatusOr<JobEvents> Coordinator::WaitJobEvents(uint64_t job_id,
                                                     uint64_t after_seq,
                                                     absl::Duration max_wait) {
  const absl::Time give_up = absl::Now() + max_wait;
  absl::MutexLock lock(&mu_);
  while (true) {
    ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
    JobEvents out;
    out.next_seq = after_seq;
    for (const auto& [seq, event] : job->events) {
      if (seq <= after_seq) continue;
      out.events.push_back(event);
      out.next_seq = seq;
    }
    out.ended = IsTerminal(job->stored.status.state());
    const absl::Duration left = give_up - absl::Now();
    if (!out.events.empty() || out.ended || left <= absl::ZeroDuration())
      return out;
    changed_.WaitWithTimeout(&mu_, left);
  }
}

}  // namespace gasloc::coordinator
