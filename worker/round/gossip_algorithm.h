// The gossip exchange and outer update shared by GASLoC (algorithms/gasloc_gossip.cc)
// and D-PSGD (algorithms/dpsgd.cc): what is gossiped by momentum placement, one
// exchange with every peer of the round, the poisoning guard, the
// two-phase edge confirmation and GossipOuterStep
// (docs/outer_algorithms.md). With exchange.encoding INT8 it gossips
// compressed differences against public copies both ends hold
// (CHOCO-gossip, public_copies.h): the confirmation then also swaps the
// copies' digests. The two differ only in the spec's numbers
// (alpha, eta, gamma, H: JobSpec defaults), not in the worker's code.
//
// Thread safety: as OuterAlgorithm; Exchange touches no trainer state, so
// it runs beside inner steps under outer.overlap_exchange.
#ifndef GASLOC_WORKER_ROUND_GOSSIP_ALGORITHM_H_
#define GASLOC_WORKER_ROUND_GOSSIP_ALGORITHM_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "worker/round/outer_algorithm.h"
#include "worker/round/outer_optimizer.h"
#include "worker/round/poison_guard.h"
#include "worker/round/public_copies.h"

namespace gasloc {

class GossipAlgorithm : public OuterAlgorithm {
 public:
  explicit GossipAlgorithm(const OuterContext& context);

  absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                          FloatArena& model) override;
  void Apply() override;
  bool KeepsPreviousIterate() const override;
  bool RunsBesideInnerSteps() const override { return true; }

  uint64_t ModelsRefused() const override { return models_refused_; }
  std::optional<EdgeDigests> PublicCopyDigests(uint64_t peer) const override;

 private:
  // Phase 1's outcomes per peer slot k and its timing. Send outcomes are
  // not used for the decision: a lost acknowledgement makes a send fail
  // that the peer committed, so the sender's view can differ from the
  // receiver's.
  struct PhaseOne {
    absl::Time start;  // when phase 1 began
    std::vector<absl::Status> received, sent;
    double max_send_seconds = 0, max_receive_seconds = 0;
    // Concurrent receives: the exchange's wire time is the longest one's.
    double max_wire_seconds = 0;
  };
  // Writes what is gossiped from theta at H_i (`model`) and returns it.
  std::span<const float> PrepareGossiped(const FloatArena& model);
  // Phase 1: sends `gossiped` to every peer and receives each peer's into
  // received_, both directions at once.
  PhaseOne SendAndReceive(OuterRound& round, std::span<const float> gossiped,
                          const FloatArena& model);
  // Poisoning guard: a committed model too far from ours is refused before
  // the edge confirmation, so both ends drop the edge. Returns the
  // distance per slot (-1: not received).
  std::vector<double> RefuseDistantModels(OuterRound& round,
                                          std::span<const float> gossiped,
                                          PhaseOne& phase);
  // Phase 2: with each peer, swap whether we committed each other's y.
  // Returns per peer slot OK (use the edge) or why it is dropped; both
  // ends of an edge reach the same decision unless a peer fails between
  // the two phases.
  std::vector<absl::Status> ConfirmEdges(OuterRound& round,
                                         const PhaseOne& phase);
  // The peers whose edge holds, with the round's peer_distance and the
  // dropped peers recorded in the report.
  std::vector<GossipNeighbor> CommittedNeighbors(
      OuterRound& round, const std::vector<absl::Status>& edge,
      const std::vector<double>& distance, std::span<const float> gossiped);
  // exchange_seconds, wire_seconds and wait_seconds of the report.
  void RecordTiming(OuterRound& round, const PhaseOne& phase,
                    double exchange_seconds);

  // Compressed gossip: whether the job gossips INT8 differences, and the
  // edges' copies (created at the first exchange).
  bool compressed() const {
    return context_.spec->exchange().encoding() == v1::WIRE_ENCODING_INT8;
  }
  // After phase 1, compressed: each received q becomes the peer's
  // candidate public copy (received_ += its copy).
  void AddPeerCopies(const OuterRound& round, const PhaseOne& phase);
  // After the confirmation, compressed: held edges commit their copies;
  // edges whose ends disagreed reset them.
  void SettleCopies(const OuterRound& round,
                    const std::vector<absl::Status>& edge);
  OuterContext context_;
  std::vector<FloatArena> received_;  // one per peer slot
  std::optional<PublicCopies> copies_;
  std::vector<FloatArena> sent_q_;  // compressed: one per peer slot
  // Per peer slot of the last confirmation: the digests differed.
  std::vector<bool> copies_disagree_;
  PoisonGuard poison_guard_;
  uint64_t models_refused_ = 0;
  // What Apply adopts: y_prev <- y (LOCAL, MIXED) or momentum <- scratch
  // (PSEUDO_GRADIENT).
  bool pending_ = false;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_GOSSIP_ALGORITHM_H_
