#include "common/error_kind.h"

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

TEST(ErrorKind, IsCarriedAsAPayloadNotInTheMessage) {
  absl::Status s =
      WithErrorKind(absl::NotFoundError("nothing here"), kJobNotFound);
  EXPECT_EQ(s.message(), "nothing here");
  EXPECT_TRUE(HasErrorKind(s, kJobNotFound));
  EXPECT_FALSE(HasErrorKind(absl::NotFoundError("job 4 not found"),
                            kJobNotFound));
  EXPECT_FALSE(ErrorKindOf(absl::OkStatus()).has_value());
  EXPECT_TRUE(WithErrorKind(absl::OkStatus(), kJobNotFound).ok());
}

TEST(ErrorKind, AnnotateKeepsTheKind) {
  absl::Status s = Annotate(
      WithErrorKind(absl::NotFoundError("job 4 not found"), kJobNotFound),
      "GetAssignment");
  EXPECT_EQ(s.message(), "GetAssignment: job 4 not found");
  EXPECT_TRUE(HasErrorKind(s, kJobNotFound));
}

}  // namespace
}  // namespace gasloc
