// Round schedules: which peers each member of a membership epoch talks to in
// one outer round, and with which edge weights (algorithms.md sections 2-3), as a pure function of
// (job seed, round, epoch, members, topology). Every member computes nothing
// itself: the coordinator plans the schedule once per round and hands each
// worker its row, and because the function is deterministic a restarted
// coordinator reproduces the same schedule from the persisted epoch members.
//
//   RoundSchedule s = PlanSchedule({seed, round, epoch, topology}, n);
//   for (int j : s.peers[i]) ...   // member indices, not worker ids
//
// Topologies:
//   RANDOM_ONE_PEER  a uniformly random perfect matching (Fisher-Yates
//                    shuffle, consecutive pairs); with n odd the last member
//                    of the shuffle has no peer, so the odd one out varies.
//   RANDOM_TWO_PEER  the union of two independent matchings (<= 2 peers).
//   RING             members in sorted order, each with its two neighbours
//                    (one neighbour when n == 2).
//   COMPLETE         everyone with everyone.
//
// Thread safety: pure functions; safe from any thread.
#ifndef GASLOC_COORDINATOR_SCHEDULE_H_
#define GASLOC_COORDINATOR_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "gasloc/v1/job.pb.h"

namespace gasloc::coordinator {

// A small deterministic generator (splitmix64). Used instead of <random>
// distributions, whose output differs between standard libraries, so a
// schedule is the same on every build.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0, without modulo bias (rejection).
  uint64_t Below(uint64_t bound);

 private:
  uint64_t state_;
};

struct ScheduleKey {
  uint64_t seed = 0;
  uint64_t round = 0;
  uint64_t epoch = 0;
  v1::Topology topology = v1::TOPOLOGY_RANDOM_ONE_PEER;
  // Which of the two matchings of a RANDOM_TWO_PEER round (internal).
  uint64_t stream = 0;
};

struct RoundSchedule {
  // Members in the round.
  uint32_t n = 0;
  // COMPLETE: every member is a peer of every other one and the adjacency
  // is not stored (n^2 entries would not fit for 10,000 workers).
  bool complete = false;
  // Adjacency in compressed rows: member i's peers (indices into the
  // epoch's sorted member list, ascending) are
  // peers[offsets[i] .. offsets[i+1]). Symmetric: j is a peer of i iff i is
  // a peer of j.
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> peers;

  // Member i's peers, ascending (materialised; for COMPLETE all others).
  std::vector<uint32_t> PeersOf(uint32_t i) const;
  // Number of peers of member i.
  uint32_t Degree(uint32_t i) const;
};

// Plans the communication graph of one round for `n` members.
RoundSchedule PlanSchedule(const ScheduleKey& key, uint32_t n);

// One uniformly random matching as a partner table: partner[i] is i's peer
// or -1 (only for the odd one out). Exposed for tests and the benchmark.
std::vector<int32_t> RandomMatching(uint64_t seed, uint32_t n);

// Mixes (seed, round, epoch, stream) into one generator seed.
uint64_t ScheduleSeed(const ScheduleKey& key);

// The graph a job's rounds run on: the spec's topology for gossip
// algorithms (GASLOC, DPSGD), the complete graph for all-reduce ones.
v1::Topology RoundTopology(const v1::JobSpec& spec);

// The schedule key of a round of `spec` (seed = training.seed).
ScheduleKey RoundKey(const v1::JobSpec& spec, uint64_t round, uint64_t epoch);

// The edge weights of a round with n members, the same at both ends of
// every edge:
//   gossip on a sparse graph: alpha = outer.alpha and, Metropolis-style,
//     lambda_ij = outer.lambda * 2 / (1 + max(deg_i, deg_j)) with the
//     degrees of the round's graph. Degree 1 at both ends (a matching)
//     keeps lambda; two peers give 2/3 of it, so with the defaults
//     (alpha 1/2, lambda 1) every worker keeps weight >= 1/3 on its own y
//     and an even cycle's alternating mode is damped (it had eigenvalue
//     -1 with lambda_ij = lambda). ValidateJobSpec refuses an alpha x
//     lambda for which this matrix would not contract.
//   complete graph (TOPOLOGY_COMPLETE, every all-reduce algorithm):
//     alpha = 1/n and lambda = 1, so alpha * lambda = 1/n (full
//     averaging); every member in ring order with weight 1/n.
struct EdgeWeights {
  bool gossip = false;    // the round has gossip peers
  bool ring = false;      // the round has a ring order (complete graph)
  float alpha = 0;        // outer step size
  float peer_weight = 0;  // lambda (the scale of every gossip edge)
  float ring_weight = 0;  // weight of every member of the ring
  // lambda_ij of the edge between members i and j of `s` (symmetric).
  float PeerWeight(const RoundSchedule& s, uint32_t i, uint32_t j) const;
};
EdgeWeights RoundWeights(const v1::JobSpec& spec, uint32_t n);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_SCHEDULE_H_
