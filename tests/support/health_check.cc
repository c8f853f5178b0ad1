#include "tests/support/health_check.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

namespace gasloc::testing {

absl::StatusOr<int> CheckHealth(const std::string& address) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  // HealthCheckRequest{service = ""} serialises to zero bytes.
  grpc::Slice empty_slice;
  grpc::ByteBuffer request(&empty_slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  if (!status.ok())
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("bad response");
  std::string bytes;
  for (const auto& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1 (field 1, varint)} = 0x08 <status>.
  if (bytes.size() == 2 && bytes[0] == 0x08) return static_cast<int>(bytes[1]);
  if (bytes.empty()) return 0;  // UNKNOWN
  return absl::InternalError(absl::StrCat("unexpected health response of ",
                                          bytes.size(), " bytes"));
}

}  // namespace gasloc::testing
