#include "coordinator/replica_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(DecideReplicas, AgreeingReplicasAreNotApart) {
  const ReplicaDecision d = DecideReplicas(
      7, {{1, {.checksum = 0xabc}}, {2, {.checksum = 0xabc}},
          {3, {.checksum = 0xabc}}});
  EXPECT_FALSE(d.Diverged());
  EXPECT_THAT(d.majority, ElementsAre(1, 2, 3));
  EXPECT_THAT(d.Reason(), HasSubstr("3 replicas agree"));
}

TEST(DecideReplicas, TheMinorityAndTheBehindAreApart) {
  const ReplicaDecision d = DecideReplicas(
      4, {{1, {.checksum = 0xabc}},
          {2, {.checksum = 0xdef}},
          {3, {.checksum = 0xabc}},
          {4, {.checksum = 0x123, .behind = true}},
          {5, {.failed = true}}});
  EXPECT_TRUE(d.Diverged());
  EXPECT_EQ(d.majority_checksum, 0xabcu);
  EXPECT_THAT(d.majority, ElementsAre(1, 3));
  EXPECT_THAT(d.apart_checksum, ElementsAre(2));
  EXPECT_THAT(d.apart_behind, ElementsAre(4));
  EXPECT_TRUE(d.Apart(2));
  EXPECT_TRUE(d.Apart(4));
  EXPECT_FALSE(d.Apart(5));  // no model of the round: the join path
  EXPECT_FALSE(d.Apart(1));
  EXPECT_THAT(d.Reason(), HasSubstr("workers 2 apart from the majority"));
  EXPECT_THAT(d.Reason(), HasSubstr("workers 4 behind"));
}

TEST(DecideReplicas, ATieGoesToTheGroupWithTheLowestId) {
  const ReplicaDecision d = DecideReplicas(
      0, {{7, {.checksum = 0x1}}, {3, {.checksum = 0x2}}});
  EXPECT_EQ(d.majority_checksum, 0x2u);
  EXPECT_THAT(d.majority, ElementsAre(3));
  EXPECT_THAT(d.apart_checksum, ElementsAre(7));
}

TEST(DecideReplicas, NothingToCompareWithoutACompletedReplica) {
  const ReplicaDecision d = DecideReplicas(
      2, {{1, {.checksum = 0}}, {2, {.behind = true}}});
  EXPECT_FALSE(d.Diverged());  // no source to re-sync from
  EXPECT_THAT(d.majority, IsEmpty());
  EXPECT_THAT(d.Reason(), HasSubstr("nothing to compare"));
}

}  // namespace
}  // namespace gasloc::coordinator
