// WorkerDaemon: setting up a job. Its spec (defaults, confined paths),
// trainer and round runner, and its first model: a member's, this worker's
// checkpoint, or theta_0 in round 0 only.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/job_size.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/daemon/path_confinement.h"
#include "worker/daemon/worker_daemon.h"

namespace gasloc {

absl::StatusOr<WorkerDaemon::Job*> WorkerDaemon::PrepareJob(
    const v1::Assignment& assignment) {
  if (job_ != nullptr && job_->job_id == assignment.job_id()) return job_.get();
  if (job_ != nullptr) DropJob("a new job was assigned");
  {
    // An ended job's model kept for exports goes with the next job.
    absl::MutexLock lock(&served_mu_);
    served_.reset();
  }
  RETURN_IF_ERROR(ValidateJobSpec(assignment.spec()));
  // Before anything is allocated: a job this worker cannot hold is an
  // error for the job (reported), never std::bad_alloc.
  RETURN_IF_ERROR(CheckJobFitsWorker(assignment.spec(), options_.info));
  ASSIGN_OR_RETURN(std::unique_ptr<Job> job, NewJob(assignment));
  {
    absl::MutexLock lock(&mu_);
    progress_.Clear();
    progress_.set_job_id(job->job_id);
  }
  if (options_.metrics != nullptr)
    options_.metrics->BeginJob(job->job_id, worker_id_.load());

  RETURN_IF_ERROR(LoadJobModel(*job, assignment));
  GASLOC_LOG(INFO) << "job " << job->job_id << " (" << job->spec.name()
                   << "): " << v1::Algorithm_Name(job->spec.outer().algorithm())
                   << ", data rank " << job->shard.rank << " of "
                   << job->shard.num_workers << ", " << job->threads
                   << " thread(s)";
  job_ = std::move(job);
  return job_.get();
}

absl::StatusOr<std::unique_ptr<WorkerDaemon::Job>> WorkerDaemon::NewJob(
    const v1::Assignment& assignment) {
  auto job = std::make_unique<Job>();
  job->job_id = assignment.job_id();
  job->spec = ApplyJobSpecDefaults(assignment.spec());
  ASSIGN_OR_RETURN(const std::string corpus,
                   ConfinePath("data.corpus_path",
                               job->spec.data().corpus_path(),
                               options_.corpus_root));
  job->spec.mutable_data()->set_corpus_path(corpus);
  if (!job->spec.model().init_from().empty()) {
    ASSIGN_OR_RETURN(const std::string model_dir,
                     ConfinePath("model.init_from",
                                 job->spec.model().init_from(),
                                 options_.corpus_root));
    job->spec.mutable_model()->set_init_from(model_dir);
  }
  if (std::filesystem::path dir = job->spec.checkpoint().directory();
      !dir.empty()) {
    if (dir.is_relative()) dir = std::filesystem::path(options_.data_dir) / dir;
    ASSIGN_OR_RETURN(const std::string confined,
                     ConfinePath("checkpoint.directory", dir.string(),
                                 options_.checkpoint_root));
    job->spec.mutable_checkpoint()->set_directory(confined);
  }
  job->threads = job->spec.training().threads() > 0
                    ? static_cast<int>(job->spec.training().threads())
                    : options_.threads;
  job->shard = DataShardOf(assignment);
  ASSIGN_OR_RETURN(job->trainer,
                   trainer_factory_(job->spec, job->shard, job->threads));
  RoundRunnerOptions runner_options;
  runner_options.job_id = job->job_id;
  runner_options.spec = job->spec;
  runner_options.on_progress = [this](const RoundProgress& p) { SetProgress(p); };
  job->runner = std::make_unique<RoundRunner>(
      std::move(runner_options), job->trainer.get(), transport_, &clock_);
  if (model_fetcher_) {
    // Re-synchronisation (after a failed all-reduce, or when the
    // coordinator names a source) fetches from a member over FetchModel.
    const uint64_t job_id = job->job_id;
    const uint64_t model_elements = job->trainer->params().size();
    job->runner->set_resync_fetcher(
        [this, job_id, model_elements](const v1::PeerAssignment& member) {
          return model_fetcher_(member, job_id, worker_id_.load(),
                                model_elements);
        });
  }
  return job;
}

absl::Status WorkerDaemon::LoadJobModel(Job& job,
                                        const v1::Assignment& assignment) {
  // A member's model first (it is current), else our own newest usable
  // checkpoint of this job, else theta_0, but only in round 0: a worker
  // never starts from initial weights in a job that has trained (it would
  // gossip them into trained peers); it reports why and asks again.
  absl::Status fetch_error;
  bool have_model = false;
  if (assignment.has_model_source() &&
      assignment.model_source().worker_id() != 0 && model_fetcher_) {
    const std::string what =
        absl::StrCat("fetching the model from worker ",
                     assignment.model_source().worker_id());
    auto model = model_fetcher_(assignment.model_source(), job.job_id,
                                worker_id_.load(),
                                job.trainer->params().size());
    if (model.ok())
      fetch_error = Annotate(job.runner->InstallFetchedModel(*model), what);
    else
      fetch_error = Annotate(model.status(), what);
    if (fetch_error.ok()) {
      have_model = true;
      GASLOC_LOG(INFO) << "job " << job.job_id << ": joined with the model of "
                       << "worker " << assignment.model_source().worker_id()
                       << " at round " << model->round << " ("
                       << (model->optimizer_m.empty()
                               ? "no AdamW state sent: inner optimizer starts cold"
                               : absl::StrCat("AdamW state at step ",
                                              model->optimizer_step))
                       << ")";
    } else {
      GASLOC_LOG(WARNING) << "job " << job.job_id << ": " << fetch_error
                          << "; falling back to this worker's checkpoint";
    }
  }
  if (!have_model)
    have_model = ResumeFromCheckpoint(
        job, assignment.has_resume_from() ? &assignment.resume_from() : nullptr);
  if (!have_model && assignment.round() > 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.job_id, " is at round ", assignment.round(),
        " and this worker has no model of it (",
        fetch_error.ok() ? "no member to fetch it from"
                         : std::string(fetch_error.message()),
        "; no usable checkpoint in ",
        CheckpointPath(job).empty() ? "(no checkpoint directory)"
                                     : CheckpointPath(job),
        "): not starting from initial weights; asking again"));
  return absl::OkStatus();
}

}  // namespace gasloc
