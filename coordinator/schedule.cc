#include "coordinator/schedule.h"

#include <algorithm>
#include <numeric>

#include "common/job_spec.h"

namespace gasloc::coordinator {

uint64_t SplitMix64::Below(uint64_t bound) {
  // Largest multiple of bound representable; values above it are rejected.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % bound;
}

uint64_t ScheduleSeed(const ScheduleKey& key) {
  SplitMix64 mix(key.seed);
  uint64_t h = mix.Next();
  for (uint64_t part : {key.round, key.epoch, key.stream}) {
    SplitMix64 step(h ^ (part * 0xd6e8feb86659fd93ULL));
    h = step.Next();
  }
  return h;
}

std::vector<int32_t> RandomMatching(uint64_t seed, uint32_t n) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  SplitMix64 rng(seed);
  // Fisher-Yates: every permutation equally likely, so consecutive pairs
  // form a uniformly random perfect matching and the unmatched last member
  // (n odd) is uniform over the members.
  for (uint32_t i = n; i > 1; --i) {
    const uint32_t j = static_cast<uint32_t>(rng.Below(i));
    std::swap(order[i - 1], order[j]);
  }
  std::vector<int32_t> partner(n, -1);
  for (uint32_t k = 0; k + 1 < n; k += 2) {
    partner[order[k]] = static_cast<int32_t>(order[k + 1]);
    partner[order[k + 1]] = static_cast<int32_t>(order[k]);
  }
  return partner;
}

std::vector<uint32_t> RoundSchedule::PeersOf(uint32_t i) const {
  std::vector<uint32_t> row;
  if (complete) {
    row.reserve(n > 0 ? n - 1 : 0);
    for (uint32_t j = 0; j < n; ++j)
      if (j != i) row.push_back(j);
    return row;
  }
  return std::vector<uint32_t>(peers.begin() + offsets[i],
                               peers.begin() + offsets[i + 1]);
}

uint32_t RoundSchedule::Degree(uint32_t i) const {
  if (complete) return n > 0 ? n - 1 : 0;
  return offsets[i + 1] - offsets[i];
}

namespace {

// Builds the compressed rows from up to `k` partner tables (-1 = none),
// dropping duplicates and sorting each row.
void FromPartners(const std::vector<std::vector<int32_t>>& partners,
                  RoundSchedule& s) {
  const uint32_t n = s.n;
  s.offsets.assign(n + 1, 0);
  s.peers.clear();
  s.peers.reserve(static_cast<size_t>(n) * partners.size());
  for (uint32_t i = 0; i < n; ++i) {
    const size_t row_start = s.peers.size();
    for (const auto& partner : partners) {
      if (partner[i] < 0) continue;
      const auto p = static_cast<uint32_t>(partner[i]);
      if (std::find(s.peers.begin() + row_start, s.peers.end(), p) ==
          s.peers.end())
        s.peers.push_back(p);
    }
    std::sort(s.peers.begin() + row_start, s.peers.end());
    s.offsets[i + 1] = static_cast<uint32_t>(s.peers.size());
  }
}

}  // namespace

RoundSchedule PlanSchedule(const ScheduleKey& key, uint32_t n) {
  RoundSchedule s;
  s.n = n;
  std::vector<std::vector<int32_t>> partners;
  switch (key.topology) {
    case v1::TOPOLOGY_COMPLETE:
      s.complete = true;
      return s;
    case v1::TOPOLOGY_RANDOM_TWO_PEER:
      for (uint64_t stream : {uint64_t{1}, uint64_t{2}}) {
        ScheduleKey k = key;
        k.stream = stream;
        partners.push_back(RandomMatching(ScheduleSeed(k), n));
      }
      break;
    case v1::TOPOLOGY_RING: {
      // Successor and predecessor in sorted order (one neighbour if n == 2).
      std::vector<int32_t> next(n, -1), prev(n, -1);
      for (uint32_t i = 0; n >= 2 && i < n; ++i) {
        next[i] = static_cast<int32_t>((i + 1) % n);
        prev[i] = static_cast<int32_t>((i + n - 1) % n);
      }
      partners = {std::move(next), std::move(prev)};
      break;
    }
    case v1::TOPOLOGY_RANDOM_ONE_PEER:
    default: {
      ScheduleKey k = key;
      k.stream = 0;
      partners.push_back(RandomMatching(ScheduleSeed(k), n));
      break;
    }
  }
  FromPartners(partners, s);
  return s;
}

v1::Topology RoundTopology(const v1::JobSpec& spec) {
  return IsGossipAlgorithm(spec.outer().algorithm()) ? spec.outer().topology()
                                                     : v1::TOPOLOGY_COMPLETE;
}

ScheduleKey RoundKey(const v1::JobSpec& spec, uint64_t round, uint64_t epoch) {
  ScheduleKey key;
  key.seed = spec.training().seed();
  key.round = round;
  key.epoch = epoch;
  key.topology = RoundTopology(spec);
  return key;
}

EdgeWeights RoundWeights(const v1::JobSpec& spec, uint32_t n) {
  EdgeWeights w;
  const float one_nth = 1.0f / static_cast<float>(n);
  w.gossip = IsGossipAlgorithm(spec.outer().algorithm());
  w.ring = RoundTopology(spec) == v1::TOPOLOGY_COMPLETE;
  w.alpha = w.ring ? one_nth : spec.outer().alpha();
  if (w.gossip) w.peer_weight = w.ring ? 1.0f : spec.outer().lambda();
  if (w.ring) w.ring_weight = one_nth;
  return w;
}

float EdgeWeights::PeerWeight(const RoundSchedule& s, uint32_t i,
                              uint32_t j) const {
  if (ring) return peer_weight;  // complete graph: full averaging
  const uint32_t degree = std::max(s.Degree(i), s.Degree(j));
  return peer_weight * 2.0f / static_cast<float>(1 + degree);
}

}  // namespace gasloc::coordinator
