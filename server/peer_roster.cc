#include "server/peer_roster.h"

namespace gasloc {
namespace {

struct Probe {
  const absl::flat_hash_map<uint64_t, std::string>* identities;
  uint64_t worker_id;
};

bool Known(Probe* probe) {
  return probe->identities->contains(probe->worker_id);
}

}  // namespace

void PeerRoster::LearnOne(const v1::PeerAssignment& peer) {
  if (peer.worker_id() != 0) identities_[peer.worker_id()] = peer.identity();
}

void PeerRoster::Learn(const v1::Assignment& assignment) {
  absl::MutexLock lock(&mu_);
  for (const v1::PeerAssignment& peer : assignment.peers()) LearnOne(peer);
  for (const v1::PeerAssignment& peer : assignment.ring_order()) LearnOne(peer);
  for (const v1::PeerAssignment& peer : assignment.members()) LearnOne(peer);
  if (assignment.has_model_source()) LearnOne(assignment.model_source());
  if (assignment.members_size() > 0) {
    members_job_id_ = assignment.job_id();
    members_epoch_ = assignment.members_epoch();
  }
}

void PeerRoster::SayMembersHeld(v1::GetAssignmentRequest& request) {
  absl::MutexLock lock(&mu_);
  request.set_members_job_id(members_job_id_);
  request.set_members_epoch(members_epoch_);
}

std::optional<std::string> PeerRoster::IdentityOf(uint64_t worker_id,
                                                  absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  Probe probe{.identities = &identities_, .worker_id = worker_id};
  mu_.AwaitWithDeadline(absl::Condition(&Known, &probe), deadline);
  auto it = identities_.find(worker_id);
  if (it == identities_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gasloc
