// WorkerDaemon: its checkpoints. Where a job's checkpoints live, the
// rotation that keeps the previous ones (checkpoints_kept), and resuming
// from the newest usable one.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "worker/daemon/worker_daemon.h"

namespace gasloc {

void RotateCheckpoints(const std::vector<std::string>& kept) {
  namespace fs = std::filesystem;
  // Shift <path>.i to <path>.i+1, the oldest falling off, and hard-link the
  // latest as <path>.1; the new file then replaces <path> atomically, so a
  // crash at any point leaves the latest or the previous checkpoint.
  if (kept.size() < 2 || !fs::exists(kept[0])) return;
  std::error_code ignored;
  fs::remove(kept.back(), ignored);
  for (size_t i = kept.size() - 1; i >= 2; --i)
    if (fs::exists(kept[i - 1])) fs::rename(kept[i - 1], kept[i], ignored);
  fs::create_hard_link(kept[0], kept[1], ignored);
}

std::string WorkerDaemon::CheckpointPath(const Job& job) const {
  std::filesystem::path dir = job.spec.checkpoint().directory();
  if (dir.empty()) return "";
  if (dir.is_relative()) dir = std::filesystem::path(options_.data_dir) / dir;
  const std::string name = options_.name.empty()
                               ? absl::StrCat("w", worker_id_.load())
                               : options_.name;
  return absl::StrCat(dir.string(), "/job", job.job_id, "-", name, ".ckpt");
}

std::vector<std::string> WorkerDaemon::CheckpointCandidates(
    const Job& job) const {
  const std::string path = CheckpointPath(job);
  if (path.empty()) return {};
  std::vector<std::string> candidates = {path};
  for (int i = 1; i < options_.checkpoints_kept; ++i)
    candidates.push_back(absl::StrCat(path, ".", i));
  return candidates;
}

bool WorkerDaemon::LoadFirstUsable(Job& job,
                                   std::optional<uint64_t> next_round) {
  for (const std::string& path : CheckpointCandidates(job)) {
    if (!std::filesystem::exists(path)) continue;
    // RoundRunner::LoadCheckpoint is all or nothing: a damaged file (or
    // one of another round than asked) leaves the parameters, optimizer
    // state and data cursor as they were.
    absl::Status loaded = job.runner->LoadCheckpoint(path, next_round);
    if (loaded.ok()) {
      GASLOC_LOG(INFO) << "job " << job.job_id << ": resumed from " << path
                       << " at round " << job.runner->next_round();
      job.checkpointed_next_round = job.runner->next_round();
      return true;
    }
    GASLOC_LOG(WARNING) << "job " << job.job_id << ": checkpoint " << path
                        << " not used, trying the previous one: " << loaded;
  }
  return false;
}

bool WorkerDaemon::ResumeFromCheckpoint(Job& job,
                                        const v1::CheckpointSet* resume_from) {
  if (resume_from != nullptr) {
    // Every member of the set loads the set's round, so the replicas
    // start from the same round even if some wrote a newer checkpoint.
    if (LoadFirstUsable(job, resume_from->round() + 1)) return true;
    GASLOC_LOG(WARNING) << "job " << job.job_id
                        << ": no usable checkpoint of the job's checkpoint "
                           "set (round "
                        << resume_from->round()
                        << "); loading this worker's newest usable one";
  }
  return LoadFirstUsable(job, std::nullopt);
}

bool WorkerDaemon::WriteCheckpoint(Job& job, const std::string& path) {
  namespace fs = std::filesystem;
  const absl::Time start = clock_.Now();
  std::error_code ignored;  // SaveCheckpoint reports a missing directory
  fs::create_directories(fs::path(path).parent_path(), ignored);
  // Keep the previous ones (pruned to checkpoints_kept).
  RotateCheckpoints(CheckpointCandidates(job));
  absl::Status saved = job.runner->SaveCheckpoint(path);
  if (!saved.ok()) {
    GASLOC_LOG(WARNING) << "job " << job.job_id << ": checkpoint failed: "
                        << saved;
    return false;
  }
  job.checkpointed_next_round = job.runner->next_round();
  const absl::Duration took = clock_.Now() - start;
  GASLOC_LOG(INFO) << "job " << job.job_id << ": checkpoint " << path
                   << " written in " << took;
  if (options_.metrics != nullptr)
    options_.metrics->RecordCheckpoint(absl::ToDoubleSeconds(took));
  return true;
}

}  // namespace gasloc
