// WorkerDaemon: serving its model to a joining or re-synchronising member
// (SnapshotModel, the Peer service's FetchModel), the copy an all-reduce
// job keeps after each round (KeepServedModel), an ended job's parameters
// kept for exports (CopyParameters), and the deadline of a fetch from
// another member (WithFetchDeadline).
#include "absl/strings/str_cat.h"
#include "worker/daemon/worker_daemon.h"

namespace gasloc {
namespace {

ModelSnapshot SnapshotOf(uint64_t job_id,
                         std::shared_ptr<const WorkerDaemon::ServedModel> model) {
  ModelSnapshot snapshot;
  snapshot.job_id = job_id;
  snapshot.round = model->round;
  snapshot.params = model->params;
  snapshot.outer_state = model->outer;
  snapshot.optimizer_m = model->m;
  snapshot.optimizer_v = model->v;
  snapshot.optimizer_step = model->optimizer_step;
  snapshot.keep_alive = std::move(model);
  return snapshot;
}

}  // namespace

ModelFetcher WithFetchDeadline(DeadlineModelFetcher fetch, const Clock& clock,
                               absl::Duration timeout) {
  return [fetch = std::move(fetch), &clock, timeout](
             const v1::PeerAssignment& source, uint64_t job_id,
             uint64_t self_id, uint64_t model_elements) {
    return fetch(source, job_id, self_id, model_elements,
                 clock.Now() + timeout);
  };
}

std::shared_ptr<WorkerDaemon::ServedModel> WorkerDaemon::CopyModel(
    const Job& job) {
  auto copy = std::make_shared<ServedModel>();
  copy->job_id = job.job_id;
  copy->round = job.runner->next_round();
  auto take = [](std::vector<float>& to, const FloatArena* from) {
    if (from != nullptr) to.assign(from->flat().begin(), from->flat().end());
  };
  // The point the replicas share (an overlapped all-reduce round leaves
  // each worker's parameters ahead of it by its own steps).
  take(copy->params, &job.runner->replicated_params());
  take(copy->outer, &job.runner->outer_state());
  take(copy->m, job.trainer->optimizer_m());
  take(copy->v, job.trainer->optimizer_v());
  copy->optimizer_step = job.trainer->optimizer_step();
  return copy;
}

std::shared_ptr<WorkerDaemon::ServedModel> WorkerDaemon::CopyParameters(
    const Job& job) {
  auto copy = std::make_shared<ServedModel>();
  copy->job_id = job.job_id;
  copy->round = job.runner->next_round();
  const auto params = job.trainer->params().flat();
  copy->params.assign(params.begin(), params.end());
  return copy;
}

void WorkerDaemon::KeepServedModel(Job& job) {
  std::shared_ptr<const ServedModel> copy = CopyModel(job);
  absl::MutexLock lock(&served_mu_);
  served_ = std::move(copy);
}

absl::StatusOr<ModelSnapshot> WorkerDaemon::SnapshotModel(uint64_t job_id) {
  {
    // All-reduce jobs: the copy kept after the last round, served without
    // waiting for the round that runs now (a member re-synchronising
    // after round r asks while this worker may already train round r+1,
    // whose ring waits for that member).
    absl::MutexLock lock(&served_mu_);
    if (served_ != nullptr && served_->job_id == job_id)
      return SnapshotOf(job_id, served_);
  }
  absl::MutexLock job_lock(&job_mu_);
  if (job_ == nullptr || job_->job_id != job_id)
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker_id_.load(), " holds no model of job ", job_id));
  // Copies taken under job_mu_ (between rounds), so the served model is
  // consistent while the next round runs.
  return SnapshotOf(job_id, CopyModel(*job_));
}

}  // namespace gasloc
