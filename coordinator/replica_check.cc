#include "coordinator/replica_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gasloc::coordinator {

bool ReplicaDecision::Apart(uint64_t worker_id) const {
  return std::binary_search(apart_checksum.begin(), apart_checksum.end(),
                            worker_id) ||
         std::binary_search(apart_behind.begin(), apart_behind.end(),
                            worker_id);
}

std::string ReplicaDecision::Reason() const {
  if (majority.empty())
    return absl::StrCat("round ", round,
                        ": no member completed the round with a replica "
                        "checksum; nothing to compare");
  if (!Diverged())
    return absl::StrCat("round ", round, ": ", majority.size(),
                        " replicas agree");
  std::string reason = absl::StrCat("round ", round, ":");
  if (!apart_checksum.empty())
    absl::StrAppend(&reason, " workers ", absl::StrJoin(apart_checksum, ","),
                    " apart from the majority (");
  else
    absl::StrAppend(&reason, " majority (");
  absl::StrAppend(&reason, "workers ", absl::StrJoin(majority, ","),
                  ", checksum 0x",
                  absl::Hex(majority_checksum, absl::kZeroPad8), ")");
  if (!apart_behind.empty())
    absl::StrAppend(&reason, "; workers ", absl::StrJoin(apart_behind, ","),
                    " behind (their round did not complete)");
  return reason;
}

ReplicaDecision DecideReplicas(
    uint64_t round, const std::map<uint64_t, ReplicaReport>& reports) {
  ReplicaDecision decision;
  decision.round = round;
  // Groups by checksum; std::map order makes each group's ids sorted.
  std::map<uint32_t, std::vector<uint64_t>> groups;
  for (const auto& [id, report] : reports)
    if (!report.behind && !report.failed && report.checksum != 0)
      groups[report.checksum].push_back(id);
  const std::vector<uint64_t>* best = nullptr;
  for (const auto& [checksum, ids] : groups) {
    if (best == nullptr || ids.size() > best->size() ||
        (ids.size() == best->size() && ids.front() < best->front())) {
      best = &ids;
      decision.majority_checksum = checksum;
    }
  }
  if (best == nullptr) return decision;
  decision.majority = *best;
  for (const auto& [id, report] : reports) {
    if (report.behind) {
      decision.apart_behind.push_back(id);
    } else if (!report.failed && report.checksum != 0 &&
               report.checksum != decision.majority_checksum) {
      decision.apart_checksum.push_back(id);
    }
  }
  return decision;
}

}  // namespace gasloc::coordinator
