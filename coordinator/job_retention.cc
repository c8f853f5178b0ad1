#include "coordinator/job_retention.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gasloc::coordinator {

std::vector<ForgottenJob> JobsToForget(std::vector<EndedJob> ended,
                                       absl::Time now,
                                       const JobRetention& retention) {
  // Newest first (ties: the higher id is newer).
  std::sort(ended.begin(), ended.end(),
            [](const EndedJob& a, const EndedJob& b) {
              return a.ended != b.ended ? a.ended > b.ended
                                        : a.job_id > b.job_id;
            });
  std::vector<ForgottenJob> forget;
  for (size_t i = 0; i < ended.size(); ++i) {
    const EndedJob& job = ended[i];
    if (now - job.ended > retention.max_age) {
      forget.push_back({.job_id = job.job_id,
                        .reason = absl::StrCat(
                            "ended ", absl::FormatDuration(now - job.ended),
                            " ago (kept for ",
                            absl::FormatDuration(retention.max_age), ")")});
    } else if (i >= retention.max_ended) {
      forget.push_back(
          {.job_id = job.job_id,
           .reason = absl::StrCat("more than ", retention.max_ended,
                                  " ended jobs are kept")});
    }
  }
  return forget;
}

}  // namespace gasloc::coordinator
