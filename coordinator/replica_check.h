// Replica agreement of the all-reduce algorithms (DiLoCo, local SGD,
// data-parallel), whose members must hold bit-identical models after every
// round: a pure decision over one round's reports of the replica checksum
// (ReportRoundRequest.replica_checksum), naming the members apart from the
// majority and the members they re-synchronise from
// (Assignment.resync_source). The Coordinator gathers the reports per
// round, calls DecideReplicas once every member of the round's epoch has
// reported, counts and logs the result, and builds the next assignments.
//
// Thread safety: pure functions; safe from any thread.
#ifndef GASLOC_COORDINATOR_REPLICA_CHECK_H_
#define GASLOC_COORDINATOR_REPLICA_CHECK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gasloc::coordinator {

// One member's report of a round, as far as replicas go.
struct ReplicaReport {
  uint32_t checksum = 0;  // 0 = none (gossip, or a failed round)
  bool behind = false;    // its model is not that of a completed round
  bool failed = false;    // it reported a failed round or set-up
};

// What a round's reports say about its replicas.
struct ReplicaDecision {
  // The majority: the largest group of members that completed the round
  // with one checksum; a tie goes to the group holding the lowest worker
  // id (any one model, as long as all end equal). Empty when no member
  // completed the round with a checksum (nothing to compare).
  uint32_t majority_checksum = 0;
  std::vector<uint64_t> majority;  // sorted
  // Members to re-synchronise from a majority member, sorted: those with
  // another checksum, and those behind (a failed all-reduce they could not
  // repair, or a failed round). Members that failed their set-up hold no
  // model of the round and are not listed.
  std::vector<uint64_t> apart_checksum;
  std::vector<uint64_t> apart_behind;
  uint64_t round = 0;
  // "round 7: workers 3 apart from the majority (2 of 3, checksum
  // 0x1a2b3c4d); workers 5 behind", or "round 7: 3 replicas agree".
  std::string Reason() const;
  bool Diverged() const {
    return !apart_checksum.empty() || !apart_behind.empty();
  }
  bool Apart(uint64_t worker_id) const;
};

// Decides over `reports` (worker id -> report) of round `round`.
ReplicaDecision DecideReplicas(uint64_t round,
                               const std::map<uint64_t, ReplicaReport>& reports);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_REPLICA_CHECK_H_
