// Early-return helpers for absl::Status / absl::StatusOr (Debian's Abseil
// 20220623 ships none). Header-only; no state, so trivially thread-safe.
//
//   RETURN_IF_ERROR(WriteHeader(file));
//   ASSIGN_OR_RETURN(auto plan, PlanRound(now, state, options));
//   ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(path));
#ifndef GASLOC_COMMON_STATUS_MACROS_H_
#define GASLOC_COMMON_STATUS_MACROS_H_

#include "absl/strings/string_view.h"
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define GASLOC_STATUS_CONCAT_INNER_(a, b) a##b
#define GASLOC_STATUS_CONCAT_(a, b) GASLOC_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function if it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    ::absl::Status gasloc_status_ = (expr);                    \
    if (!gasloc_status_.ok()) return gasloc_status_;           \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from
// the enclosing function, otherwise move-assigns the value to `lhs`, which
// may be a declaration ("auto x", "const Foo& y" is not allowed).
#define ASSIGN_OR_RETURN(lhs, rexpr)                                         \
  GASLOC_ASSIGN_OR_RETURN_IMPL_(                                             \
      GASLOC_STATUS_CONCAT_(gasloc_statusor_, __LINE__), lhs, rexpr)

#define GASLOC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

namespace gasloc {

// Returns `status` with `context` prepended to its message ("context: msg"),
// keeping the code and the payloads (an error's kind, common/error_kind.h).
// OK stays OK.
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(),
                         absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) {
        annotated.SetPayload(url, payload);
      });
  return annotated;
}

}  // namespace gasloc

#endif  // GASLOC_COMMON_STATUS_MACROS_H_
