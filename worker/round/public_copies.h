// Compressed gossip against public copies (CHOCO-gossip, Koloskova et al.
// 2019; exchange.encoding INT8 for GASLoC and D-PSGD; algorithms.md,
// "INT8 for gossip"): for each peer it has gossiped with, a worker keeps two
// model-sized copies that the peer holds too, bit for bit:
//   own   x^_{i->j}: what the peer knows of this worker's gossiped point
//   peer  x^_{j->i}: what this worker knows of the peer's
// An exchange sends q = Q(x_i - own) (Q: the INT8 rounding, int8_codec.h)
// and receives the peer's; once the edge is confirmed both ends add the
// same q's to the same copies (Commit), and the gossip step mixes the
// copies: theta' = x_i - alpha w (own - peer). The pair's sum moves by
// nothing but fp32 rounding, and the copies track the points to within
// the INT8 step of their difference, which shrinks as they converge.
//
// Agreement: a copy pair starts at zero at both ends (a new edge). An
// edge is committed by both ends or by neither (GossipAlgorithm's
// confirmation), except when a peer fails between the two phases; then
// the ends' digests (Digests, swapped in the confirmation: one end's own
// copy is the other's peer copy) differ at their next meeting, that edge
// is dropped for the round, and both ends Reset its copies. A worker that restarts or evicts an edge (more than
// kMaxPublicCopyEdges peers) starts it again the same way.
//
// Thread safety: none; one exchange at a time (the gossip exchange's
// thread).
#ifndef GASLOC_WORKER_ROUND_PUBLIC_COPIES_H_
#define GASLOC_WORKER_ROUND_PUBLIC_COPIES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>

#include "common/arena.h"

namespace gasloc {

// Peers whose copies a worker keeps (two model-sized buffers each); the
// edge used longest ago is dropped first. A random one- or two-peer
// schedule over n workers meets at most n - 1 peers.
inline constexpr size_t kMaxPublicCopyEdges = 16;

// CRC-32C of an edge's two copies.
struct EdgeDigests {
  uint32_t own = 0;
  uint32_t peer = 0;
};

class PublicCopies {
 public:
  explicit PublicCopies(std::shared_ptr<const ArenaLayout> layout);

  // Writes q = Q(x - own copy for `peer`) into `send` (model-sized) and
  // returns it; creates the peer's copies (zero) if absent. `x` must be
  // finite.
  std::span<const float> PrepareSend(uint64_t peer, std::span<const float> x,
                                     std::span<float> send, uint64_t round);
  // received += the peer's copy: the peer's candidate public point once
  // `received` holds its q.
  void AddPeerCopy(uint64_t peer, std::span<float> received) const;
  // The copies' digests before this round's commit (zeros' for an edge
  // not held). Ends that agree see each other's own as their peer.
  EdgeDigests Digests(uint64_t peer) const;
  // The edge holds: own += sent q; peer copy = candidate (from
  // AddPeerCopy).
  void Commit(uint64_t peer, std::span<const float> sent_q,
              std::span<const float> candidate);
  // The ends disagreed: the edge is forgotten (zero copies next time).
  void Reset(uint64_t peer) { edges_.erase(peer); }
  // The copies of `peer` (empty spans if none).
  std::span<const float> Own(uint64_t peer) const;
  std::span<const float> Peer(uint64_t peer) const;
  size_t edges() const { return edges_.size(); }

 private:
  struct Edge {
    explicit Edge(const std::shared_ptr<const ArenaLayout>& layout)
        : own(layout), peer(layout) {
      own.SetZero();
      peer.SetZero();
    }
    FloatArena own, peer;
    uint64_t last_round = 0;
  };
  // The edge of `peer`, created if absent (evicting the one used longest
  // ago past kMaxPublicCopyEdges).
  Edge& EdgeOf(uint64_t peer, uint64_t round);
  const Edge* Find(uint64_t peer) const;

  std::shared_ptr<const ArenaLayout> layout_;
  uint32_t zero_digest_;  // of a model-sized copy of zeros
  std::map<uint64_t, Edge> edges_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_PUBLIC_COPIES_H_
