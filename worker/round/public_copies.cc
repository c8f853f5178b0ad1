#include "worker/round/public_copies.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "worker/exchange/int8_codec.h"

namespace gasloc {
namespace {

uint32_t CrcOf(std::span<const float> values) {
  return Crc32c(values.data(), values.size_bytes());
}

}  // namespace

PublicCopies::PublicCopies(std::shared_ptr<const ArenaLayout> layout)
    : layout_(std::move(layout)) {
  const std::vector<float> zeros(4096, 0.0f);
  uint32_t crc = 0;
  for (size_t left = layout_->total_floats(); left > 0;) {
    const size_t n = std::min(left, zeros.size());
    crc = Crc32cExtend(crc, zeros.data(), n * sizeof(float));
    left -= n;
  }
  zero_digest_ = crc;
}

PublicCopies::Edge& PublicCopies::EdgeOf(uint64_t peer, uint64_t round) {
  auto it = edges_.find(peer);
  if (it == edges_.end()) {
    if (edges_.size() >= kMaxPublicCopyEdges) {
      auto oldest = std::min_element(
          edges_.begin(), edges_.end(), [](const auto& a, const auto& b) {
            return a.second.last_round < b.second.last_round;
          });
      edges_.erase(oldest);
    }
    it = edges_.try_emplace(peer, layout_).first;
  }
  it->second.last_round = round;
  return it->second;
}

const PublicCopies::Edge* PublicCopies::Find(uint64_t peer) const {
  auto it = edges_.find(peer);
  return it == edges_.end() ? nullptr : &it->second;
}

std::span<const float> PublicCopies::PrepareSend(uint64_t peer,
                                                 std::span<const float> x,
                                                 std::span<float> send,
                                                 uint64_t round) {
  const float* own = EdgeOf(peer, round).own.data();
  for (size_t i = 0; i < send.size(); ++i) send[i] = x[i] - own[i];
  RoundToInt8(send);
  return send;
}

void PublicCopies::AddPeerCopy(uint64_t peer, std::span<float> received) const {
  const Edge* edge = Find(peer);
  if (edge == nullptr) return;  // zero copies
  const float* copy = edge->peer.data();
  for (size_t i = 0; i < received.size(); ++i) received[i] += copy[i];
}

EdgeDigests PublicCopies::Digests(uint64_t peer) const {
  const Edge* edge = Find(peer);
  if (edge != nullptr) return {CrcOf(edge->own.flat()), CrcOf(edge->peer.flat())};
  // An edge not held: zero copies, as a new edge has.
  return {zero_digest_, zero_digest_};
}

void PublicCopies::Commit(uint64_t peer, std::span<const float> sent_q,
                          std::span<const float> candidate) {
  auto it = edges_.find(peer);
  if (it == edges_.end()) return;  // PrepareSend created it
  float* own = it->second.own.data();
  for (size_t i = 0; i < sent_q.size(); ++i) own[i] += sent_q[i];
  std::copy(candidate.begin(), candidate.end(), it->second.peer.data());
}

std::span<const float> PublicCopies::Own(uint64_t peer) const {
  const Edge* edge = Find(peer);
  return edge ? edge->own.flat() : std::span<const float>();
}

std::span<const float> PublicCopies::Peer(uint64_t peer) const {
  const Edge* edge = Find(peer);
  return edge ? edge->peer.flat() : std::span<const float>();
}

}  // namespace gasloc
