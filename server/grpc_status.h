// The one conversion between gRPC and absl statuses (the codes are
// numerically the same; the message is kept, and an error's kind,
// common/error_kind.h, travels as the google.rpc.ErrorInfo of the status
// details, proto/gasloc/v1/error.proto).
//
// Thread safety: pure functions.
#ifndef GASLOC_SERVER_GRPC_STATUS_H_
#define GASLOC_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gasloc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace gasloc

#endif  // GASLOC_SERVER_GRPC_STATUS_H_
