#include "server/grpc_status.h"

#include <string>

#include "common/error_kind.h"
#include "gasloc/v1/error.pb.h"

namespace gasloc {
namespace {

constexpr char kErrorInfoUrl[] = "type.googleapis.com/google.rpc.ErrorInfo";

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  std::string message(status.message());
  std::optional<std::string> kind = ErrorKindOf(status);
  if (!kind.has_value()) return grpc::Status(code, message);
  // The kind as the standard details (proto/gasloc/v1/error.proto).
  v1::ErrorInfo info;
  info.set_reason(*kind);
  info.set_domain(std::string(kErrorDomain));
  v1::RpcStatus details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(message);
  google::protobuf::Any* any = details.add_details();
  any->set_type_url(kErrorInfoUrl);
  any->set_value(info.SerializeAsString());
  return grpc::Status(code, message, details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status converted(static_cast<absl::StatusCode>(status.error_code()),
                         status.error_message());
  if (status.error_details().empty()) return converted;
  v1::RpcStatus details;
  if (!details.ParseFromString(status.error_details())) return converted;
  for (const google::protobuf::Any& any : details.details()) {
    v1::ErrorInfo info;
    if (any.type_url() != kErrorInfoUrl || !info.ParseFromString(any.value()) ||
        info.domain() != kErrorDomain)
      continue;
    return WithErrorKind(std::move(converted), info.reason());
  }
  return converted;
}

}  // namespace gasloc
