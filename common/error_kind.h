// Errors whose kind a caller acts on say it in the status, never in words
// another file parses: the kind is an absl::Status payload inside a
// process, and on the wire the google.rpc.ErrorInfo reason of the gRPC
// status details (proto/gasloc/v1/error.proto, server/grpc_status.h).
// Annotate (common/status_macros.h) keeps the payload.
//
// Thread safety: pure functions.
#ifndef GASLOC_COMMON_ERROR_KIND_H_
#define GASLOC_COMMON_ERROR_KIND_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/optional.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace gasloc {

// The payload's type URL, and the ErrorInfo domain on the wire.
inline constexpr absl::string_view kErrorKindUrl =
    "type.googleapis.com/gasloc.v1.ErrorKind";
inline constexpr absl::string_view kErrorDomain = "gasloc";

// The kinds, each with what a caller does about it.
//   JOB_NOT_FOUND: the coordinator does not know the job (it lost its
//     database, or forgot the ended job): a worker drops the job.
inline constexpr absl::string_view kJobNotFound = "JOB_NOT_FOUND";
//   RECEIVER_NOT_READY: a peer's mailbox waited its early_chunk_wait for
//     the transfer to be registered and it was not (the peer is still in
//     an earlier round): the sender sends again on a new stream until its
//     own deadline (RunTransfers, worker/exchange/mailbox.h).
inline constexpr absl::string_view kReceiverNotReady = "RECEIVER_NOT_READY";

// `status` with its kind set (OK stays OK).
inline absl::Status WithErrorKind(absl::Status status, absl::string_view kind) {
  if (!status.ok()) status.SetPayload(kErrorKindUrl, absl::Cord(kind));
  return status;
}

// The kind `status` carries; nullopt for none (or OK).
inline std::optional<std::string> ErrorKindOf(const absl::Status& status) {
  // absl::optional: Debian's Abseil is not built with std::optional.
  absl::optional<absl::Cord> kind = status.GetPayload(kErrorKindUrl);
  if (!kind.has_value()) return std::nullopt;
  return std::string(*kind);
}

inline bool HasErrorKind(const absl::Status& status, absl::string_view kind) {
  std::optional<std::string> carried = ErrorKindOf(status);
  return carried.has_value() && *carried == kind;
}

}  // namespace gasloc

#endif  // GASLOC_COMMON_ERROR_KIND_H_
