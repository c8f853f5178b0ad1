#include "worker/round/ring_algorithm.h"

#include <algorithm>
#include <utility>

#include "common/crc32c.h"
#include "common/log.h"
#include "worker/round/outer_optimizer.h"

namespace gasloc {
namespace {

// Copies a ring all-reduce's traffic and timing into the round report.
void RecordRingTraffic(const RingAllReduceResult& result,
                       v1::ReportRoundRequest* report) {
  report->set_bytes_sent(result.bytes_sent);
  report->set_bytes_received(result.bytes_received);
  report->set_exchange_seconds(result.seconds);
  report->set_wait_seconds(result.wait_seconds);
  if (result.wire_seconds > 0) {
    report->set_wire_seconds(result.wire_seconds);
    report->set_wait_seconds(std::max(0.0, result.seconds - result.wire_seconds));
    v1::LinkSample* sample = report->add_link_samples();
    sample->set_peer_id(result.predecessor_id);
    sample->set_bytes(result.bytes_received);
    sample->set_wire_seconds(result.wire_seconds);
  }
}

}  // namespace

uint32_t ReplicaChecksum(std::span<const float> params,
                         std::span<const float> outer, const FloatArena* m,
                         const FloatArena* v) {
  uint32_t crc = Crc32cExtend(0, params.data(), params.size_bytes());
  crc = Crc32cExtend(crc, outer.data(), outer.size_bytes());
  for (const FloatArena* moment : {m, v})
    if (moment != nullptr)
      crc = Crc32cExtend(crc, moment->data(), moment->size() * sizeof(float));
  return crc == 0 ? 1 : crc;  // 0 means "not computed" in the report
}

std::vector<RingMember> RingOf(const v1::Assignment& assignment,
                               uint64_t self_id, int* rank) {
  std::vector<RingMember> ring;
  *rank = -1;
  for (const auto& member : assignment.ring_order()) {
    if (member.worker_id() == self_id) *rank = static_cast<int>(ring.size());
    ring.push_back(
        {.worker_id = member.worker_id(), .address = member.address()});
  }
  return ring;
}

std::vector<RingMember> RingOrSelf(const OuterContext& context,
                                   OuterRound& round, int* rank) {
  const uint64_t self = context.transport->self_id();
  std::vector<RingMember> ring = RingOf(*round.assignment, self, rank);
  if (*rank >= 0) return ring;
  // Not in the ring (a malformed assignment): average over nobody.
  round.report->set_failure_reason(
      "this worker is not in the round's ring order");
  *rank = 0;
  return {{.worker_id = self, .address = ""}};
}

ExchangeResult RingExchange(const OuterContext& context, OuterRound& round,
                            const std::vector<RingMember>& ring, int rank,
                            std::span<float> data, std::span<float> scratch,
                            ErrorFeedback* feedback) {
  const TransferKey key{.job_id = context.job_id,
                        .round = round.assignment->round(),
                        .phase = v1::EXCHANGE_PHASE_REDUCE_SCATTER,
                        .step = 0};
  const std::span<float> residual =
      feedback != nullptr ? feedback->FoldInto(data) : std::span<float>();
  const RingAllReduceResult result =
      RingAllReduceMean(*context.transport, *context.clock, key, ring, rank,
                        data, scratch, MakeExchangeOptions(context), residual);
  RecordRingTraffic(result, round.report);
  if (result.status.ok()) return {};
  if (feedback != nullptr) feedback->Reset();
  for (uint64_t peer : result.failed_peers) {
    round.report->add_failed_peers(peer);
    round.failure_codes->push_back(result.status.code());
  }
  round.report->set_failure_reason(result.status.ToString());
  GASLOC_LOG(WARNING) << "job " << context.job_id << " round "
                      << round.assignment->round()
                      << ": all-reduce failed, no update applied; "
                         "re-synchronising: "
                      << result.status;
  return {.resync = true, .failed_peers = result.failed_peers};
}

absl::StatusOr<ExchangeResult> PseudoGradientRing::Exchange(OuterRound& round,
                                                            FloatArena& model) {
  pending_ = false;
  OuterBuffers& b = *context_.buffers;
  PseudoGradient(b.theta_start.flat(), model.flat(), b.y.flat());
  int rank = -1;
  const std::vector<RingMember> ring = RingOrSelf(context_, round, &rank);
  ExchangeResult result = RingExchange(context_, round, ring, rank, b.y.flat(),
                                       b.scratch.flat(), &feedback_);
  if (result.resync) {
    model.CopyFrom(b.theta_start);
    return result;
  }
  // v_t goes to scratch (free once the ring is done) and is adopted only
  // when the new parameters are finite.
  const auto& outer = context_.spec->outer();
  NesterovOuterStep(b.theta_start.flat(), b.y.flat(), outer.lr(), outer.mu(),
                    b.momentum.flat(), b.scratch.flat(), model.flat());
  pending_ = true;
  return result;
}

void PseudoGradientRing::Apply() {
  if (pending_) std::swap(context_.buffers->momentum, context_.buffers->scratch);
  pending_ = false;
}

std::optional<uint32_t> PseudoGradientRing::ReplicaChecksum() const {
  return gasloc::ReplicaChecksum(
      ReplicatedParameters(*context_.buffers, context_.trainer->params())
          .flat(),
      context_.buffers->momentum.flat());
}

const FloatArena& ReplicatedParameters(const OuterBuffers& buffers,
                                       const FloatArena& params) {
  return buffers.start_carried ? buffers.theta_start : params;
}

}  // namespace gasloc
