// Per-peer caps and server-side deadlines of inbound peer calls
// (worker/exchange/inbound_limits.h), on a FakeClock.
#include "worker/exchange/inbound_limits.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

TEST(InboundLimits, CapsCallsPerPeerAndKind) {
  InboundLimits limits(InboundLimitsOptions{.max_streams_per_peer = 2,
                                            .max_fetches_per_peer = 1});
  auto a = limits.Admit("ipv4:10.0.0.1", InboundKind::kExchange, nullptr);
  auto b = limits.Admit("ipv4:10.0.0.1", InboundKind::kExchange, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = limits.Admit("ipv4:10.0.0.1", InboundKind::kExchange, nullptr);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("ipv4:10.0.0.1"));
  // Another peer, and another kind, have their own slots.
  EXPECT_TRUE(limits.Admit("ipv4:10.0.0.2", InboundKind::kExchange, nullptr)
                  .ok());
  auto f = limits.Admit("ipv4:10.0.0.1", InboundKind::kFetch, nullptr);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(
      limits.Admit("ipv4:10.0.0.1", InboundKind::kFetch, nullptr).ok());
  a->reset();  // a call ends: its slot is free again
  EXPECT_TRUE(limits.Admit("ipv4:10.0.0.1", InboundKind::kExchange, nullptr)
                  .ok());
}

TEST(InboundLimits, IdleAndTotalDeadlinesCancel) {
  FakeClock clock;
  InboundLimits limits(
      InboundLimitsOptions{.idle_timeout = absl::Seconds(10),
                           .exchange_total_timeout = absl::Seconds(100),
                           .clock = &clock});
  int silent_cancels = 0, busy_cancels = 0, chatty_cancels = 0;
  auto silent = limits.Admit("p", InboundKind::kExchange,
                             [&] { ++silent_cancels; });
  auto busy = limits.Admit("p", InboundKind::kExchange,
                           [&] { ++busy_cancels; });
  auto chatty = limits.Admit("p", InboundKind::kExchange,
                             [&] { ++chatty_cancels; });
  (*busy)->SetBusy(true);  // waiting in the mailbox: not idle
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(limits.CancelExpired(), 0);
  (*chatty)->Touch();
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(limits.CancelExpired(), 1);
  EXPECT_EQ(silent_cancels, 1);
  EXPECT_THAT((*silent)->cancelled_because(), HasSubstr("idle deadline"));
  EXPECT_EQ(limits.CancelExpired(), 0);  // cancelled once
  // Busy or chatty, no call outlives the total deadline.
  for (int i = 0; i < 10; ++i) {
    clock.Advance(absl::Seconds(9));
    (*chatty)->Touch();
    limits.CancelExpired();
  }
  EXPECT_EQ(busy_cancels, 1);
  EXPECT_EQ(chatty_cancels, 1);
  EXPECT_THAT((*busy)->cancelled_because(), HasSubstr("total deadline"));
}

}  // namespace
}  // namespace gasloc
