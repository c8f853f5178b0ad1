#include "coordinator/schedule.h"

#include <algorithm>
#include <numeric>

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
  if (!complete) return peers[i];
  std::vector<uint32_t> row;
  row.reserve(n > 0 ? n - 1 : 0);
  for (uint32_t j = 0; j < n; ++j)
    if (j != i) row.push_back(j);
  return row;
}

RoundSchedule PlanSchedule(const ScheduleKey& key, uint32_t n) {
  RoundSchedule s;
  s.n = n;
  s.peers.resize(n);
  switch (key.topology) {
    case v1::TOPOLOGY_RANDOM_TWO_PEER: {
      for (uint64_t stream : {uint64_t{1}, uint64_t{2}}) {
        ScheduleKey k = key;
        k.stream = stream;
        const std::vector<int32_t> partner = RandomMatching(ScheduleSeed(k), n);
        for (uint32_t i = 0; i < n; ++i) {
          if (partner[i] < 0) continue;
          auto& row = s.peers[i];
          const auto p = static_cast<uint32_t>(partner[i]);
          if (std::find(row.begin(), row.end(), p) == row.end()) row.push_back(p);
        }
      }
      for (auto& row : s.peers) std::sort(row.begin(), row.end());
      break;
    }
    case v1::TOPOLOGY_RING: {
      if (n < 2) break;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t next = (i + 1) % n, prev = (i + n - 1) % n;
        s.peers[i].push_back(std::min(next, prev));
        if (next != prev) s.peers[i].push_back(std::max(next, prev));
      }
      break;
    }
    case v1::TOPOLOGY_COMPLETE:
      s.complete = true;
      s.peers.clear();
      break;
    case v1::TOPOLOGY_RANDOM_ONE_PEER:
    default: {
      ScheduleKey k = key;
      k.stream = 0;
      const std::vector<int32_t> partner = RandomMatching(ScheduleSeed(k), n);
      for (uint32_t i = 0; i < n; ++i)
        if (partner[i] >= 0) s.peers[i].push_back(static_cast<uint32_t>(partner[i]));
      break;
    }
  }
  return s;
}

}  // namespace gasloc::coordinator
