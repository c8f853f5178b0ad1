// The worker registry: ids, idle set, leases in expiry order, leave, and
// rebuilding from stored workers while keeping the in-memory leases.
#include "coordinator/membership.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);
constexpr absl::Duration kLease = absl::Seconds(10);

v1::WorkerInfo Info(const char* address) {
  v1::WorkerInfo info;
  info.set_address(address);
  info.set_cores(2);
  return info;
}

TEST(MembershipTest, RegisterBindReleaseKeepTheIdleSet) {
  Membership m(kLease);
  Membership::Worker& a = m.Register(Info("a:1"), kT0);
  Membership::Worker& b = m.Register(Info("b:1"), kT0);
  EXPECT_EQ(a.stored.worker_id, 1u);
  EXPECT_EQ(b.stored.worker_id, 2u);
  EXPECT_THAT(m.idle(), ElementsAre(1u, 2u));
  m.SetJob(a, 7);
  EXPECT_EQ(a.stored.job_id, 7u);
  EXPECT_THAT(m.idle(), ElementsAre(2u));
  m.SetJob(a, 0);
  EXPECT_THAT(m.idle(), ElementsAre(1u, 2u));
  EXPECT_EQ(m.lease_ms(), 10000u);
}

TEST(MembershipTest, LeasesExpireInOrderAndRenewalPostponesThem) {
  Membership m(kLease);
  Membership::Worker& a = m.Register(Info("a:1"), kT0);
  m.Register(Info("b:1"), kT0 + absl::Seconds(1));
  m.Renew(a, kT0 + absl::Seconds(5));
  EXPECT_EQ(m.ExpireNext(kT0 + absl::Seconds(10)), nullptr);
  Membership::Worker* dead = m.ExpireNext(kT0 + absl::Seconds(11));
  ASSERT_NE(dead, nullptr);
  EXPECT_EQ(dead->stored.worker_id, 2u);
  EXPECT_EQ(dead->stored.state, v1::WORKER_STATE_DEAD);
  EXPECT_EQ(m.ExpireNext(kT0 + absl::Seconds(11)), nullptr);
  EXPECT_THAT(m.idle(), ElementsAre(1u));
  EXPECT_EQ(m.live_count(), 1u);
  auto gone = m.Live(2);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("lease expired"));
  EXPECT_THAT(m.Live(9).status().message(), HasSubstr("not registered"));
}

TEST(MembershipTest, LeaveDropsTheLease) {
  Membership m(kLease);
  Membership::Worker& a = m.Register(Info("a:1"), kT0);
  m.Leave(a);
  EXPECT_EQ(m.live_count(), 0u);
  EXPECT_TRUE(m.idle().empty());
  EXPECT_EQ(m.ExpireNext(kT0 + absl::Hours(1)), nullptr);
  EXPECT_THAT(m.Live(1).status().message(), HasSubstr("has left"));
}

TEST(MembershipTest, RestoreGivesFreshLeasesAndKeepLeasesOfKeepsTheOldOnes) {
  Membership before(kLease);
  Membership::Worker& a = before.Register(Info("a:1"), kT0);
  before.Register(Info("b:1"), kT0);
  before.Renew(a, kT0 + absl::Seconds(3));
  a.progress.set_round(4);

  std::vector<StoredWorker> stored;
  for (const auto& [id, w] : before.workers()) stored.push_back(w.stored);
  const absl::Time later = kT0 + absl::Seconds(8);
  Membership restarted(kLease);
  restarted.Restore(stored, later);
  EXPECT_EQ(restarted.at(1).lease_expiry, later + kLease);
  EXPECT_EQ(restarted.Register(Info("c:1"), later).stored.worker_id, 3u)
      << "ids continue after the stored ones";

  Membership rebuilt(kLease);
  rebuilt.Restore(stored, later);
  rebuilt.KeepLeasesOf(before);
  EXPECT_EQ(rebuilt.at(1).lease_expiry, kT0 + absl::Seconds(13));
  EXPECT_EQ(rebuilt.at(1).progress.round(), 4u);
  Membership::Worker* first = rebuilt.ExpireNext(kT0 + absl::Seconds(10));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->stored.worker_id, 2u) << "b's lease ran out where it was";
}

TEST(MembershipTest, StatusAndAges) {
  Membership m(kLease);
  m.Register(Info("a:1"), kT0);
  const v1::WorkerStatus s = m.StatusOf(m.at(1), kT0 + absl::Seconds(2));
  EXPECT_EQ(s.worker_id(), 1u);
  EXPECT_EQ(s.info().address(), "a:1");
  EXPECT_EQ(s.heartbeat_age_ms(), 2000u);
  const auto ages = m.LiveAges(kT0 + absl::Seconds(3));
  ASSERT_EQ(ages.size(), 1u);
  EXPECT_EQ(ages[0].heartbeat_age_seconds, 3.0);
}

}  // namespace
}  // namespace gasloc::coordinator
