// Coordinator: the membership calls (RegisterWorker, Heartbeat,
// LeaveWorker, ListWorkers), lease expiry, and binding workers to jobs
// (pending jobs start, running jobs take joiners, orphaned jobs fail). The
// registry itself is membership.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/link_bandwidth.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/request_bounds.h"

namespace gasloc::coordinator {

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  TickForRead(clock_->Now());
}

void Coordinator::TickLocked(absl::Time now) {
  ExpireLeases(now);
  AssignIdleWorkers(now);
  CheckOrphans(now);
  ForgetOldJobs(now);
}

void Coordinator::ExpireLeases(absl::Time now) {
  while (WorkerRec* w = membership_.ExpireNext(now)) {
    GASLOC_LOG(WARNING) << "worker " << w->stored.worker_id << " ("
                        << w->stored.info.address() << ") lease expired: dead";
    Metric([](CoordinatorMetrics& m) { m.RecordWorkerLeave("lease_expired"); });
    ReleaseWorker(*w, now);
    SaveWorker(*w);
  }
}

void Coordinator::BindWorker(JobRec& job, WorkerRec& w) {
  const uint64_t id = w.stored.worker_id;
  membership_.SetJob(w, job.stored.status.job_id());
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
  const uint64_t worker_id = w.stored.worker_id;
  membership_.SetJob(w, 0);
  SaveWorker(w);
  if (job_id == 0) return;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobRec& job = it->second;
  auto member = job.members.find(worker_id);
  if (member != job.members.end()) {
    // A member that finished the job keeps its last loss and bpb in the
    // job's means (the final bpb is every finisher's, not the last one's).
    if (!member->second.got_stop) Contribute(job, member->second, -1);
    job.members.erase(member);
  }
  job.setup_failures.erase(worker_id);
  Write([&](Store& s) { return s.DeleteMember(job_id, worker_id); });
  if (job.stored.status.state() == v1::JOB_STATE_RUNNING) {
    UpdateProgress(job, now);
    SaveJob(job);  // the progress, so that the database has what memory has
    MaybeFinish(job, now);
  }
}

void Coordinator::AssignIdleWorkers(absl::Time now) {
  const std::set<uint64_t>& idle = membership_.idle();
  bool pending_left = false;
  for (auto& [id, job] : jobs_) {
    v1::JobStatus& st = job.stored.status;
    if (st.state() != v1::JOB_STATE_PENDING) continue;
    const uint32_t min_workers = st.spec().min_workers();
    if (idle.size() < min_workers) {
      const std::string message =
          absl::StrCat("waiting for ", min_workers, " idle workers (",
                       idle.size(), " available)");
      if (st.message() != message) {
        st.set_message(message);
        SaveJob(job);
      }
      pending_left = true;
      continue;
    }
    const uint32_t max_workers = st.spec().max_workers();
    std::vector<uint64_t> taken;
    for (uint64_t wid : idle) {
      if (max_workers > 0 && taken.size() >= max_workers) break;
      taken.push_back(wid);
    }
    for (uint64_t wid : taken) BindWorker(job, membership_.at(wid));
    st.set_state(v1::JOB_STATE_RUNNING);
    st.set_started_unix_ms(absl::ToUnixMillis(now));
    const uint64_t job_id = id;
    Metric([job_id](CoordinatorMetrics& m) { m.BeginJob(job_id); });
    st.set_message(absl::StrCat("running with ", taken.size(), " workers"));
    SaveJob(job);
    GASLOC_LOG(INFO) << "job " << id << " (" << st.spec().name()
                     << ") RUNNING with workers " << FormatIdList(taken);
    AddEvent(job, v1::JOB_EVENT_KIND_STATE,
             absl::StrCat("job running with workers ", FormatIdList(taken)),
             now);
  }
  // Idle workers are kept for pending jobs; otherwise they join running
  // jobs below max_workers at those jobs' next planned round.
  if (pending_left) return;
  for (auto& [id, job] : jobs_) {
    if (idle.empty()) break;
    const v1::JobStatus& st = job.stored.status;
    if (st.state() != v1::JOB_STATE_RUNNING || job.stored.stop_round >= 0)
      continue;
    const uint32_t max_workers = st.spec().max_workers();
    // A worker dropped from the job for failing its rounds stays out.
    const std::vector<uint64_t>& dropped = job.stored.dropped;
    std::vector<uint64_t> joiners;
    for (uint64_t wid : idle) {
      if (max_workers > 0 && job.members.size() + joiners.size() >= max_workers)
        break;
      if (!std::binary_search(dropped.begin(), dropped.end(), wid))
        joiners.push_back(wid);
    }
    for (uint64_t wid : joiners) {
      GASLOC_LOG(INFO) << "worker " << wid << " joins job " << id
                       << " from round " << job.next_round;
      BindWorker(job, membership_.at(wid));
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
      FailJob(job, "no_live_worker",
              absl::StrCat("no live worker for ",
                           absl::FormatDuration(options_.orphan_timeout)),
              now);
    }
  }
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  const v1::WorkerInfo& info = request.info();
  if (info.address().empty())
    return absl::InvalidArgumentError("info.address is required (host:port)");
  if (info.cores() < 1 || info.cores() > 4096)
    return absl::InvalidArgumentError(
        absl::StrCat("info.cores must be in [1, 4096], got ", info.cores()));
  return Durably([&]() -> absl::StatusOr<v1::RegisterWorkerResponse> {
    absl::MutexLock lock(&mu_);
    return Call([&](absl::Time now) { return RegisterLocked(info, now); });
  });
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterLocked(
    const v1::WorkerInfo& info, absl::Time now) {
  WorkerRec& w = membership_.Register(info, now);
  const uint64_t id = w.stored.worker_id;
  SaveWorker(w);
  Metric([](CoordinatorMetrics& m) { m.RecordWorkerJoin("registered"); });
  GASLOC_LOG(INFO) << "worker " << id << " registered: " << info.address()
                   << ", " << info.cores() << " cores, version "
                   << info.software_version();
  TickLocked(now);
  v1::RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_lease_ms(membership_.lease_ms());
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& request) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  return Durably([&]() -> absl::StatusOr<v1::HeartbeatResponse> {
    absl::MutexLock lock(&mu_);
    return Call([&](absl::Time now) {
      TickLocked(now);
      return HeartbeatLocked(request, now);
    });
  });
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::HeartbeatLocked(
    const v1::HeartbeatRequest& request, absl::Time now) {
  ASSIGN_OR_RETURN(WorkerRec * w, membership_.Live(request.worker_id()));
  // An id this coordinator gave to another worker: the sender's id is from
  // a database that was lost; it must register anew.
  const std::string& registered_name = w->stored.info.name();
  if (!request.name().empty() && !registered_name.empty() &&
      request.name() != registered_name)
    return absl::NotFoundError(absl::StrCat(
        "worker ", request.worker_id(), " is registered as \"",
        registered_name, "\", not \"", request.name(),
        "\" (an id from a lost database): register again"));
  membership_.Renew(*w, now);
  w->progress = request.progress();
  v1::HeartbeatResponse response;
  response.set_lease_ms(membership_.lease_ms());
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
  return response;
}

absl::Status Coordinator::LeaveWorker(const v1::LeaveWorkerRequest& request) {
  RETURN_IF_ERROR(CheckRequestBounds(request));
  return Durably([&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    return Call([&](absl::Time now) { return LeaveLocked(request, now); });
  });
}

absl::Status Coordinator::LeaveLocked(const v1::LeaveWorkerRequest& request,
                                      absl::Time now) {
  ASSIGN_OR_RETURN(WorkerRec * w, membership_.Live(request.worker_id()));
  GASLOC_LOG(INFO) << "worker " << request.worker_id() << " left ("
                   << request.reason() << ")";
  membership_.Leave(*w);
  Metric([](CoordinatorMetrics& m) { m.RecordWorkerLeave("left"); });
  ReleaseWorker(*w, now);
  TickLocked(now);
  return absl::OkStatus();
}

v1::ListWorkersResponse Coordinator::ListWorkers(
    const v1::ListWorkersRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  TickForRead(now);
  v1::ListWorkersResponse response;
  for (const auto& [id, w] : membership_.workers()) {
    if (!request.include_gone() && w.stored.state != v1::WORKER_STATE_ALIVE)
      continue;
    v1::WorkerStatus* s = response.add_workers();
    *s = membership_.StatusOf(w, now);
    auto job = jobs_.find(w.stored.job_id);
    if (job == jobs_.end()) continue;
    auto m = job->second.members.find(id);
    if (m == job->second.members.end()) continue;
    s->set_local_steps(m->second.local_steps);
    // A member's link bandwidth is the planner's b_i (common/link_bandwidth.h),
    // the one number gaslocctl shows and the budgets use.
    s->mutable_progress()->set_link_bytes_per_second(
        static_cast<float>(m->second.bytes_per_second));
  }
  return response;
}

}  // namespace gasloc::coordinator
