#include "worker/round/gossip_algorithm.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"

namespace gasloc {
namespace {

// A 32-bit digest in the confirmation's floats: two 16-bit halves, each
// exact in a float.
constexpr size_t kDigestFloats = 2;

void WriteDigest(uint32_t digest, float* out) {
  out[0] = static_cast<float>(digest >> 16);
  out[1] = static_cast<float>(digest & 0xffffu);
}

// The digest, or none if the floats are not two 16-bit halves.
std::optional<uint32_t> ReadDigest(const float* in) {
  for (int i = 0; i < 2; ++i)
    if (!(in[i] >= 0.0f && in[i] <= 65535.0f) || in[i] != std::floor(in[i]))
      return std::nullopt;
  return (static_cast<uint32_t>(in[0]) << 16) | static_cast<uint32_t>(in[1]);
}

// OK if the peer's confirmation (theirs) carries the digests of the same
// two copies as ours: their own copy is our copy of them and the other
// way round.
absl::Status CompareDigests(const float* ours, const float* theirs) {
  const uint32_t our_own = *ReadDigest(ours + 1);
  const uint32_t our_peer = *ReadDigest(ours + 1 + kDigestFloats);
  const std::optional<uint32_t> their_own = ReadDigest(theirs + 1);
  const std::optional<uint32_t> their_peer =
      ReadDigest(theirs + 1 + kDigestFloats);
  if (their_own == our_peer && their_peer == our_own) return absl::OkStatus();
  return absl::AbortedError(absl::StrFormat(
      "the edge's public copies disagree (ours: own %08x, peer %08x; "
      "theirs: own %s, peer %s), as after a failure between the two phases "
      "of an earlier round or a restart: both ends reset them and the edge "
      "starts again from zero copies",
      our_own, our_peer,
      their_own ? absl::StrFormat("%08x", *their_own) : "malformed",
      their_peer ? absl::StrFormat("%08x", *their_peer) : "malformed"));
}

}  // namespace

GossipAlgorithm::GossipAlgorithm(const OuterContext& context)
    : context_(context),
      poison_guard_(context.spec->exchange().poison_distance_ratio()) {}

bool GossipAlgorithm::KeepsPreviousIterate() const {
  return context_.spec->outer().momentum_placement() !=
         v1::MOMENTUM_PLACEMENT_PSEUDO_GRADIENT;
}

void GossipAlgorithm::Apply() {
  if (!pending_) return;
  OuterBuffers& b = *context_.buffers;
  if (KeepsPreviousIterate()) {
    b.y_prev.CopyFrom(b.y);
  } else {
    std::swap(b.momentum, b.scratch);
  }
  pending_ = false;
}

std::span<const float> GossipAlgorithm::PrepareGossiped(
    const FloatArena& model) {
  const auto& outer = context_.spec->outer();
  OuterBuffers& b = *context_.buffers;
  // What is gossiped, by momentum placement: y (LOCAL); the extrapolated
  // point z = y + gamma (y - y_prev) in scratch (MIXED); or the Nesterov
  // point z = theta + eta (g + gamma v') in y, v' in scratch
  // (PSEUDO_GRADIENT, whose update is then plain mixing of z).
  if (!KeepsPreviousIterate()) {
    PseudoGradient(b.theta_start.flat(), model.flat(), b.y.flat());
    NesterovOuterStep(b.theta_start.flat(), b.y.flat(), outer.eta(),
                      outer.gamma(), b.momentum.flat(), b.scratch.flat(),
                      b.y.flat());
    return b.y.flat();
  }
  PostLocalIterate(b.theta_start.flat(), model.flat(), outer.eta(), b.y.flat());
  if (outer.momentum_placement() != v1::MOMENTUM_PLACEMENT_MIXED)
    return b.y.flat();
  ExtrapolatedPoint(b.y.flat(), b.y_prev.flat(), outer.gamma(),
                    b.scratch.flat());
  return b.scratch.flat();
}

absl::StatusOr<ExchangeResult> GossipAlgorithm::Exchange(OuterRound& round,
                                                         FloatArena& model) {
  pending_ = false;
  const auto& outer = context_.spec->outer();
  const std::span<const float> gossiped = PrepareGossiped(model);
  PhaseOne phase = SendAndReceive(round, gossiped, model);
  if (compressed()) AddPeerCopies(round, phase);
  const std::vector<double> distance =
      RefuseDistantModels(round, gossiped, phase);
  const std::vector<absl::Status> edge = ConfirmEdges(round, phase);
  if (compressed()) SettleCopies(round, edge);
  const std::vector<GossipNeighbor> neighbors =
      CommittedNeighbors(round, edge, distance, gossiped);
  // PSEUDO_GRADIENT: y holds z and no momentum follows the mixing, so
  // this is theta' = z - alpha sum_j lambda_ij (q(z) - z_j).
  const bool pseudo_gradient_momentum = !KeepsPreviousIterate();
  OuterBuffers& b = *context_.buffers;
  GossipOuterStep(
      b.y.flat(), neighbors, round.assignment->alpha(),
      pseudo_gradient_momentum ? 0.0f : outer.gamma(),
      pseudo_gradient_momentum ? b.y.flat() : b.y_prev.flat(), model.flat(),
      {.sent = gossiped,
       .bf16 = context_.spec->exchange().encoding() == v1::WIRE_ENCODING_BF16});
  pending_ = true;
  RecordTiming(round, phase,
               absl::ToDoubleSeconds(context_.clock->Now() - phase.start));
  return ExchangeResult{};
}

GossipAlgorithm::PhaseOne GossipAlgorithm::SendAndReceive(
    OuterRound& round, std::span<const float> gossiped,
    const FloatArena& model) {
  const v1::Assignment& assignment = *round.assignment;
  v1::ReportRoundRequest* report = round.report;
  const int peer_count = assignment.peers_size();
  while (static_cast<int>(received_.size()) < peer_count)
    received_.emplace_back(model.shared_layout());
  const uint64_t size = model.size();
  if (compressed()) {
    if (!copies_) copies_.emplace(model.shared_layout());
    while (static_cast<int>(sent_q_.size()) < peer_count)
      sent_q_.emplace_back(model.shared_layout());
  }
  std::vector<OutgoingTransfer> sends;
  std::vector<IncomingTransfer> receives;
  for (int k = 0; k < peer_count; ++k) {
    const auto& peer = assignment.peers(k);
    // Compressed: q = Q(x - the copy this peer holds of us), per peer.
    const std::span<const float> data =
        compressed() ? copies_->PrepareSend(peer.worker_id(), gossiped,
                                            sent_q_[k].flat(),
                                            assignment.round())
                     : gossiped;
    sends.push_back({.peer_id = peer.worker_id(),
                     .address = peer.address(),
                     .data = data,
                     .range_begin = 0,
                     .range_end = size});
    receives.push_back({.peer_id = peer.worker_id(),
                        .buffer = received_[k].flat(),
                        .range_begin = 0,
                        .range_end = size});
  }
  PhaseOne phase;
  // The exchange's time starts here, its buffers ready.
  phase.start = context_.clock->Now();
  const TransferKey key{.job_id = context_.job_id,
                        .round = assignment.round(),
                        .phase = v1::EXCHANGE_PHASE_GOSSIP,
                        .step = 0};
  std::vector<TransferOutcome> outcomes;
  if (peer_count > 0)
    outcomes = context_.transport->Exchange(key, sends, receives,
                                            MakeExchangeOptions(context_));
  phase.received.resize(peer_count);
  phase.sent.resize(peer_count);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const TransferOutcome& outcome = outcomes[i];
    const int k = static_cast<int>(i % peer_count);
    (outcome.incoming ? phase.received : phase.sent)[k] = outcome.status;
    if (!outcome.status.ok()) continue;
    if (!outcome.incoming) {
      report->set_bytes_sent(report->bytes_sent() + outcome.bytes);
      phase.max_send_seconds = std::max(phase.max_send_seconds, outcome.seconds);
      continue;
    }
    report->set_bytes_received(report->bytes_received() + outcome.bytes);
    phase.max_receive_seconds =
        std::max(phase.max_receive_seconds, outcome.seconds);
    // The first-chunk scaling is an estimate: at most the receive's time.
    const double wire = std::min(outcome.wire_seconds, outcome.seconds);
    phase.max_wire_seconds = std::max(phase.max_wire_seconds, wire);
    if (wire > 0) {
      v1::LinkSample* sample = report->add_link_samples();
      sample->set_peer_id(outcome.peer_id);
      sample->set_bytes(outcome.bytes);
      sample->set_wire_seconds(wire);
    }
  }
  return phase;
}

std::vector<double> GossipAlgorithm::RefuseDistantModels(
    OuterRound& round, std::span<const float> gossiped, PhaseOne& phase) {
  const v1::Assignment& assignment = *round.assignment;
  const int peer_count = assignment.peers_size();
  std::vector<double> distance(peer_count, -1);
  for (int k = 0; k < peer_count; ++k) {
    if (!phase.received[k].ok()) continue;
    distance[k] = L2Distance(gossiped, received_[k].flat());
    absl::Status guard = poison_guard_.Check(distance[k]);
    if (guard.ok()) continue;
    phase.received[k] = guard;
    round.report->add_refused_peers(assignment.peers(k).worker_id());
    ++models_refused_;
    GASLOC_LOG(WARNING) << "job " << context_.job_id << " round "
                        << assignment.round() << ": worker "
                        << assignment.peers(k).worker_id() << ": " << guard;
  }
  return distance;
}

std::vector<absl::Status> GossipAlgorithm::ConfirmEdges(OuterRound& round,
                                                        const PhaseOne& phase) {
  const v1::Assignment& assignment = *round.assignment;
  const std::vector<absl::Status>& received = phase.received;
  const std::vector<absl::Status>& sent = phase.sent;
  const int peer_count = assignment.peers_size();
  std::vector<absl::Status> edge(peer_count);
  // Each end tells the other whether it committed the other's y (1) or
  // not (0), as a one-float transfer (GOSSIP, step 1). An edge is used iff
  // this end committed the peer's y AND the peer says it committed ours:
  // both ends apply the same rule to the same two facts, whatever became
  // of the acknowledgements. A peer with which nothing got through in
  // phase 1 gets no confirmation (it waits for ours until its deadline and
  // drops the edge too).
  // Compressed gossip adds the digests of the edge's public copies, each
  // 32-bit CRC as two exact 16-bit halves: [committed, own, peer].
  const size_t width = compressed() ? 1 + 2 * kDigestFloats : 1;
  copies_disagree_.assign(peer_count, false);
  std::vector<float> mine(peer_count * width, 0.0f),
      theirs(peer_count * width, 0.0f);
  std::vector<OutgoingTransfer> sends;
  std::vector<IncomingTransfer> receives;
  std::vector<int> slots;
  for (int k = 0; k < peer_count; ++k) {
    if (!received[k].ok() && !sent[k].ok()) {
      edge[k] = sent[k];  // sends end first (an absent peer: at once)
      continue;
    }
    float* message = &mine[k * width];
    message[0] = received[k].ok() ? 1.0f : 0.0f;
    const auto& peer = assignment.peers(k);
    if (compressed()) {
      const EdgeDigests digests = copies_->Digests(peer.worker_id());
      WriteDigest(digests.own, message + 1);
      WriteDigest(digests.peer, message + 1 + kDigestFloats);
    }
    sends.push_back({.peer_id = peer.worker_id(),
                     .address = peer.address(),
                     .data = std::span<const float>(message, width),
                     .range_begin = 0,
                     .range_end = width});
    receives.push_back({.peer_id = peer.worker_id(),
                        .buffer = std::span<float>(&theirs[k * width], width),
                        .range_begin = 0,
                        .range_end = width});
    slots.push_back(k);
  }
  if (slots.empty()) return edge;
  ExchangeOptions options = MakeExchangeOptions(context_);
  options.encoding = v1::WIRE_ENCODING_FP32;
  const TransferKey key{.job_id = context_.job_id,
                        .round = assignment.round(),
                        .phase = v1::EXCHANGE_PHASE_GOSSIP,
                        .step = 1};
  const std::vector<TransferOutcome> outcomes =
      context_.transport->Exchange(key, sends, receives, options);
  v1::ReportRoundRequest* report = round.report;
  for (const TransferOutcome& outcome : outcomes) {
    if (!outcome.status.ok()) continue;
    if (outcome.incoming) {
      report->set_bytes_received(report->bytes_received() + outcome.bytes);
    } else {
      report->set_bytes_sent(report->bytes_sent() + outcome.bytes);
    }
  }
  for (size_t s = 0; s < slots.size(); ++s) {
    const int k = slots[s];
    const absl::Status& confirm = outcomes[slots.size() + s].status;
    // Compressed: copies that disagree make the peer's q meaningless
    // whatever else happened to the edge (the poisoning guard may have
    // refused the garbage it decodes to), so they are checked first.
    if (compressed() && confirm.ok()) {
      absl::Status agree = CompareDigests(&mine[k * width], &theirs[k * width]);
      if (!agree.ok()) {
        copies_disagree_[k] = true;
        edge[k] = agree;
        continue;
      }
    }
    if (!received[k].ok()) {
      edge[k] = received[k];
    } else if (!confirm.ok()) {
      edge[k] = absl::Status(confirm.code(),
                             absl::StrCat("no confirmation of the edge: ",
                                          confirm.message()));
    } else if (theirs[k * width] != 1.0f) {
      edge[k] = absl::AbortedError(absl::StrCat(
          "the peer did not commit our y",
          sent[k].ok() ? "" : absl::StrCat(" (our send: ", sent[k].ToString(), ")")));
    }
  }
  return edge;
}

void GossipAlgorithm::AddPeerCopies(const OuterRound& round,
                                    const PhaseOne& phase) {
  for (int k = 0; k < round.assignment->peers_size(); ++k)
    if (phase.received[k].ok())
      copies_->AddPeerCopy(round.assignment->peers(k).worker_id(),
                           received_[k].flat());
}

void GossipAlgorithm::SettleCopies(const OuterRound& round,
                                   const std::vector<absl::Status>& edge) {
  const v1::Assignment& assignment = *round.assignment;
  for (int k = 0; k < assignment.peers_size(); ++k) {
    const uint64_t peer = assignment.peers(k).worker_id();
    if (edge[k].ok()) {
      copies_->Commit(peer, sent_q_[k].flat(), received_[k].flat());
    } else if (copies_disagree_[k]) {
      copies_->Reset(peer);
    }
  }
}

std::optional<EdgeDigests> GossipAlgorithm::PublicCopyDigests(
    uint64_t peer) const {
  if (!copies_ || copies_->Own(peer).empty()) return std::nullopt;
  return copies_->Digests(peer);
}

std::vector<GossipNeighbor> GossipAlgorithm::CommittedNeighbors(
    OuterRound& round, const std::vector<absl::Status>& edge,
    const std::vector<double>& distance, std::span<const float> gossiped) {
  const v1::Assignment& assignment = *round.assignment;
  v1::ReportRoundRequest* report = round.report;
  const int peer_count = assignment.peers_size();
  std::string failure;
  // peer_distance: the RMS over this round's committed peers of
  // ||x_i - x_j|| (x = what is gossiped: y, or z for MIXED), this worker's
  // neighbourhood view of the spread (algorithms.md, "Peer distance").
  std::vector<GossipNeighbor> neighbors;
  double squared_sum = 0;
  for (int k = 0; k < peer_count; ++k) {
    if (!edge[k].ok()) {
      report->add_failed_peers(assignment.peers(k).worker_id());
      round.failure_codes->push_back(edge[k].code());
      absl::StrAppend(&failure, failure.empty() ? "" : "; ", "worker ",
                      assignment.peers(k).worker_id(), ": ", edge[k].ToString());
      continue;
    }
    // Compressed: received_ holds the peer's public copy (committed), and
    // the edge mixes it against ours as the peer holds it.
    neighbors.push_back(
        {.y = received_[k].flat(),
         .weight = assignment.peers(k).weight(),
         .own = compressed() ? copies_->Own(assignment.peers(k).worker_id())
                             : std::span<const float>()});
    const double d = distance[k] >= 0
                         ? distance[k]
                         : L2Distance(gossiped, received_[k].flat());
    poison_guard_.Accept(d);
    squared_sum += d * d;
  }
  if (!neighbors.empty())
    report->set_peer_distance(static_cast<float>(
        std::sqrt(squared_sum / static_cast<double>(neighbors.size()))));
  if (!failure.empty()) {
    report->set_failure_reason(failure);
    GASLOC_LOG(WARNING) << "job " << context_.job_id << " round "
                        << assignment.round() << ": gossip without "
                        << report->failed_peers_size()
                        << " peer(s): " << failure;
  }
  return neighbors;
}

void GossipAlgorithm::RecordTiming(OuterRound& round, const PhaseOne& phase,
                                   double exchange_seconds) {
  v1::ReportRoundRequest* report = round.report;
  report->set_exchange_seconds(exchange_seconds);
  // Waiting = everything in the exchange that was not bytes moving; without
  // a wire measurement, the receives' time beyond the sends' (the old
  // estimate).
  const double wire_seconds = std::min(phase.max_wire_seconds, exchange_seconds);
  if (wire_seconds > 0) {
    report->set_wire_seconds(wire_seconds);
    report->set_wait_seconds(std::max(0.0, exchange_seconds - wire_seconds));
  } else {
    report->set_wait_seconds(
        std::max(0.0, phase.max_receive_seconds - phase.max_send_seconds));
  }
}

}  // namespace gasloc
