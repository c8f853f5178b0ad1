// Which authenticated worker name stands behind each worker id, as the
// coordinator told this worker in its assignments (PeerAssignment.identity
// of peers, ring members, the model source and every job member). The
// Peer service asks it whether a caller bound to a worker name may write a
// sender_id (Exchange) or a requester_id (FetchModel): only the id the
// coordinator registered under that name. Which ids are scheduled for a
// job and round is the Mailbox's business (worker/exchange/mailbox.h).
//
// Worker ids are never reused by a coordinator, so what was learnt stays
// true; a chunk may arrive before this worker's own assignment names its
// sender, hence IdentityOf waits (up to a deadline) for the id to appear.
// It also remembers which job's member list (and of which membership
// epoch) it holds, so that later requests can say so and the coordinator
// leaves the unchanged list out (GetAssignmentRequest.members_epoch).
//
// Thread safety: all methods may be called from any thread.
#ifndef GASLOC_SERVER_PEER_ROSTER_H_
#define GASLOC_SERVER_PEER_ROSTER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc {

class PeerRoster {
 public:
  // Records the identities `assignment` names, and its member list's job
  // and epoch when it carries the list.
  void Learn(const v1::Assignment& assignment);
  // Sets request.members_job_id and members_epoch to the list held (both 0
  // when none was learnt yet).
  void SayMembersHeld(v1::GetAssignmentRequest& request);
  // The identity of `worker_id` once known; nullopt if it is still unknown
  // at `deadline`.
  std::optional<std::string> IdentityOf(uint64_t worker_id,
                                        absl::Time deadline);

 private:
  void LearnOne(const v1::PeerAssignment& peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::string> identities_ ABSL_GUARDED_BY(mu_);
  uint64_t members_job_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0 = no list held
  uint64_t members_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_PEER_ROSTER_H_
