#include "server/grpc_status.h"

#include "common/error_kind.h"
#include "gasloc/v1/error.pb.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

TEST(GrpcStatus, CodeAndMessageCrossUnchanged) {
  grpc::Status wire = ToGrpcStatus(absl::NotFoundError("worker 3 unknown"));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(wire.error_message(), "worker 3 unknown");
  EXPECT_TRUE(wire.error_details().empty());
  absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back, absl::NotFoundError("worker 3 unknown"));
  EXPECT_FALSE(ErrorKindOf(back).has_value());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

// The kind travels as google.rpc.Status details holding a
// google.rpc.ErrorInfo (domain "gasloc"), which any gRPC client decodes.
TEST(GrpcStatus, TheErrorKindTravelsAsErrorInfo) {
  grpc::Status wire = ToGrpcStatus(
      WithErrorKind(absl::NotFoundError("job 4 not found"), kJobNotFound));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(wire.error_message(), "job 4 not found");
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(wire.error_details()));
  EXPECT_EQ(details.code(), 5);
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(),
            "type.googleapis.com/google.rpc.ErrorInfo");
  v1::ErrorInfo info;
  ASSERT_TRUE(info.ParseFromString(details.details(0).value()));
  EXPECT_EQ(info.reason(), "JOB_NOT_FOUND");
  EXPECT_EQ(info.domain(), "gasloc");
  absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(back.message(), "job 4 not found");
  EXPECT_TRUE(HasErrorKind(back, kJobNotFound));
}

}  // namespace
}  // namespace gasloc
