// The in-process transport: a gossip pair in both directions at once, a
// ring-style segment exchange, bf16, and every injected fault ending in the
// documented status within the deadline. Time is a FakeClock: a deadline
// or an injected delay passes when the test moves it (or, with
// auto-advance, the clock jumps to the one wait left), never by sleeping.
#include "worker/exchange/in_process_transport.h"

#include <cmath>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/wait_for.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

constexpr size_t kArena = 5000;

std::vector<float> Model(uint64_t worker) {
  std::vector<float> v(kArena);
  for (size_t i = 0; i < kArena; ++i)
    v[i] = static_cast<float>(worker) + 0.001f * static_cast<float>(i);
  return v;
}

MailboxOptions ShortWait(const Clock* clock) {
  MailboxOptions options;
  options.early_chunk_wait = absl::Seconds(5);
  options.clock = clock;
  return options;
}

struct PairResult {
  std::vector<TransferOutcome> a, b;
};

class InProcessTest : public ::testing::Test {
 protected:
  InProcessTest()
      : net_(ShortWait(&clock_)),
        a_(net_.Join(1)),
        b_(net_.Join(2)),
        model_a_(Model(1)),
        model_b_(Model(2)),
        scratch_a_(kArena, 0.0f),
        scratch_b_(kArena, 0.0f) {}

  // Workers 1 and 2 swap their whole models at the same time.
  PairResult Swap(absl::Duration timeout = absl::Seconds(10),
                  v1::WireEncoding encoding = v1::WIRE_ENCODING_FP32) {
    options_.encoding = encoding;
    options_.chunk_bytes = 4096;
    options_.deadline = clock_.Now() + timeout;
    PairResult r;
    std::thread other([&] {
      OutgoingTransfer send{1, InProcessNetwork::Address(1), model_b_, 0,
                            kArena};
      IncomingTransfer recv{1, scratch_b_, 0, kArena};
      r.b = b_->Exchange(key_, {&send, 1}, {&recv, 1}, options_);
    });
    OutgoingTransfer send{2, InProcessNetwork::Address(2), model_a_, 0,
                          kArena};
    IncomingTransfer recv{2, scratch_a_, 0, kArena};
    r.a = a_->Exchange(key_, {&send, 1}, {&recv, 1}, options_);
    other.join();
    return r;
  }

  // Worker 2 streams its model to worker 1 (one direction only), worker 1
  // on `receiver`'s thread; returns (2's send, 1's receive).
  std::pair<TransferOutcome, TransferOutcome> OneWay(absl::Duration timeout,
                                                     std::thread* receiver) {
    options_.chunk_bytes = 4096;
    options_.deadline = clock_.Now() + timeout;
    std::vector<TransferOutcome> received;
    *receiver = std::thread([&] {
      IncomingTransfer recv{2, scratch_a_, 0, kArena};
      received = a_->Exchange(key_, {}, {&recv, 1}, options_);
    });
    OutgoingTransfer send{1, InProcessNetwork::Address(1), model_b_, 0,
                          kArena};
    std::vector<TransferOutcome> sent =
        b_->Exchange(key_, {&send, 1}, {}, options_);
    receiver->join();
    return {sent.at(0), received.at(0)};
  }

  TransferKey key_{9, 1, v1::EXCHANGE_PHASE_GOSSIP, 0};
  ExchangeOptions options_;
  FakeClock clock_;
  InProcessNetwork net_;
  std::unique_ptr<InProcessTransport> a_, b_;
  std::vector<float> model_a_, model_b_, scratch_a_, scratch_b_;
};

TEST_F(InProcessTest, JoinRejectsADuplicateId) {
  EXPECT_EQ(net_.Join(1), nullptr);
  EXPECT_EQ(a_->self_id(), 1u);
}

TEST_F(InProcessTest, GossipPairSwapsModelsInBothDirections) {
  PairResult r = Swap();
  ASSERT_EQ(r.a.size(), 2u);
  for (const auto* side : {&r.a, &r.b}) {
    EXPECT_FALSE((*side)[0].incoming);
    EXPECT_TRUE((*side)[1].incoming);
    for (const auto& o : *side) {
      EXPECT_TRUE(o.status.ok()) << o.status;
      EXPECT_EQ(o.bytes, kArena * 4);
    }
  }
  EXPECT_EQ(scratch_a_, model_b_);
  EXPECT_EQ(scratch_b_, model_a_);
}

TEST_F(InProcessTest, Bf16HalvesTheBytesAndRoundsEachValue) {
  PairResult r = Swap(absl::Seconds(10), v1::WIRE_ENCODING_BF16);
  ASSERT_TRUE(r.a[1].status.ok()) << r.a[1].status;
  EXPECT_EQ(r.a[1].bytes, kArena * 2);
  for (size_t i = 0; i < kArena; ++i)
    ASSERT_EQ(scratch_a_[i], Bf16ToFloat(FloatToBf16(model_b_[i])));
}

TEST_F(InProcessTest, RingSegmentsMoveOnlyTheirRange) {
  // Reduce-scatter style: 1 sends segment [0, 2000) to 2 while 2 sends
  // segment [2000, 5000) to 1.
  key_ = {9, 1, v1::EXCHANGE_PHASE_REDUCE_SCATTER, 3};
  options_.deadline = clock_.Now() + absl::Seconds(10);
  std::vector<TransferOutcome> rb;
  std::thread other([&] {
    OutgoingTransfer send{1, "", model_b_, 2000, 5000};
    IncomingTransfer recv{1, scratch_b_, 0, 2000};
    rb = b_->Exchange(key_, {&send, 1}, {&recv, 1}, options_);
  });
  OutgoingTransfer send{2, "", model_a_, 0, 2000};
  IncomingTransfer recv{2, scratch_a_, 2000, 5000};
  auto ra = a_->Exchange(key_, {&send, 1}, {&recv, 1}, options_);
  other.join();
  for (const auto& o : ra) EXPECT_TRUE(o.status.ok()) << o.status;
  for (const auto& o : rb) EXPECT_TRUE(o.status.ok()) << o.status;
  for (size_t i = 0; i < kArena; ++i) {
    ASSERT_EQ(scratch_a_[i], i >= 2000 ? model_b_[i] : 0.0f) << i;
    ASSERT_EQ(scratch_b_[i], i < 2000 ? model_a_[i] : 0.0f) << i;
  }
}

TEST_F(InProcessTest, DroppedPeerTimesOutItsPartnerWithoutHanging) {
  net_.AddFault(InProcessFault::DropPeer(2));
  // Nothing moves, so the receives' waits are the only ones: each ends
  // exactly at the deadline.
  clock_.SetAutoAdvance(true);
  const absl::Time start = clock_.Now();
  PairResult r = Swap(absl::Milliseconds(300));
  EXPECT_EQ(r.a[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.a[1].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.b[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(scratch_b_, std::vector<float>(kArena, 0.0f));
}

TEST_F(InProcessTest, CutStreamFailsUnavailableAndNeverCommits) {
  net_.AddFault(InProcessFault::CutAfterChunks(2, 1, 2));
  PairResult r = Swap();
  EXPECT_EQ(r.b[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.a[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.a[1].status.message(),
              HasSubstr("2048 of 5000 elements without the last chunk"));
  // The other direction is unaffected.
  EXPECT_TRUE(r.a[0].status.ok());
  EXPECT_TRUE(r.b[1].status.ok());
  EXPECT_EQ(scratch_b_, model_a_);
}

TEST_F(InProcessTest, CorruptChunkIsReportedToBothSides) {
  net_.AddFault(InProcessFault::CorruptChunk(1, 2, 1));
  PairResult r = Swap();
  EXPECT_EQ(r.a[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.a[0].status.message(), HasSubstr("bad checksum"));
  EXPECT_EQ(r.b[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.a[1].status.ok());
}

// The acknowledgement is part of every transport: a transfer the receiver
// committed but never acknowledged is a failed send.
TEST_F(InProcessTest, LostAcknowledgementFailsTheSendOnly) {
  net_.AddFault(InProcessFault::DropAck(1, 2));
  PairResult r = Swap();
  EXPECT_EQ(r.a[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.a[0].status.message(), HasSubstr("without an acknowledgement"));
  EXPECT_TRUE(r.b[1].status.ok()) << r.b[1].status;  // it did commit
  EXPECT_TRUE(r.a[1].status.ok()) << r.a[1].status;
  EXPECT_TRUE(r.b[0].status.ok()) << r.b[0].status;
  EXPECT_EQ(scratch_b_, model_a_);
}

TEST_F(InProcessTest, FaultLimitedToOneRoundLeavesTheNextRoundAlone) {
  net_.AddFault(InProcessFault::CorruptChunk(1, 0, 0).InRound(1));
  PairResult r1 = Swap();
  EXPECT_FALSE(r1.b[1].status.ok());
  key_.round = 2;
  PairResult r2 = Swap();
  for (const auto& o : r2.a) EXPECT_TRUE(o.status.ok()) << o.status;
  for (const auto& o : r2.b) EXPECT_TRUE(o.status.ok()) << o.status;
}

TEST_F(InProcessTest, DelayWithinTheDeadlineStillSucceeds) {
  net_.AddFault(InProcessFault::Delay(2, 0, absl::Milliseconds(100)));
  const absl::Time start = clock_.Now();
  std::thread receiver;
  std::pair<TransferOutcome, TransferOutcome> r;
  std::thread sender([&] { r = OneWay(absl::Seconds(10), &receiver); });
  // Worker 2 sleeps out its delay and worker 1 waits for it: nothing is
  // sent until the delay has passed.
  clock_.AwaitWaiters(2);
  EXPECT_EQ(scratch_a_, std::vector<float>(kArena, 0.0f));
  clock_.Advance(absl::Milliseconds(100));
  sender.join();
  EXPECT_TRUE(r.first.status.ok()) << r.first.status;
  EXPECT_TRUE(r.second.status.ok()) << r.second.status;
  EXPECT_DOUBLE_EQ(r.first.seconds, 0.1);
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(scratch_a_, model_b_);
}

TEST_F(InProcessTest, SilentPeerMeansDeadlineExceededOnBothSides) {
  net_.AddFault(InProcessFault::Silent(2, 0));
  // The hung sender and its receiver both wait for the deadline (the only
  // waits), so the clock jumps there.
  clock_.SetAutoAdvance(true);
  const absl::Time start = clock_.Now();
  std::thread receiver;
  auto [sent, received] = OneWay(absl::Milliseconds(300), &receiver);
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(received.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sent.status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(InProcessTest, PeerPastTheRoundIsGivenUpAtOnceNotAtTheDeadline) {
  // Worker 2 already gave up on round 1 (its own deadline passed): it
  // refuses worker 1's late transfer and will not send. Worker 1 must not
  // wait its whole deadline for data that cannot come.
  b_->mailbox().FinishRound(key_.job_id, key_.round);
  options_.chunk_bytes = 4096;
  options_.deadline = clock_.Now() + absl::Seconds(5);
  OutgoingTransfer send{2, InProcessNetwork::Address(2), model_a_, 0, kArena};
  IncomingTransfer recv{2, scratch_a_, 0, kArena};
  const absl::Time start = clock_.Now();
  // The clock does not move: only the refusal can end the wait.
  auto out = a_->Exchange(key_, {&send, 1}, {&recv, 1}, options_);
  EXPECT_EQ(clock_.Now(), start);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out[1].status.message(), HasSubstr("will not come"));
  EXPECT_EQ(scratch_a_, std::vector<float>(kArena, 0.0f));
}

TEST_F(InProcessTest, UnknownPeerIsUnavailable) {
  options_.deadline = clock_.Now() + absl::Seconds(1);
  OutgoingTransfer send{42, "inproc:42", model_a_, 0, kArena};
  auto out = a_->Exchange(key_, {&send, 1}, {}, options_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kUnavailable);
}
// Worker 1 is still in an earlier round: it registers its receive 6 s
// after worker 2 started sending, past the mailbox's 5 s early_chunk_wait
// but within the 30 s deadline. Worker 2's first stream is refused as not
// yet registered (the mailbox saw the clock pass its wait), worker 2 sends
// again, and the transfer commits. Before, the send failed with
// FAILED_PRECONDITION "expects no transfer" and worker 2 gave up on
// worker 1 for the round: a dropped edge whenever a partner lagged more
// than early_chunk_wait behind (issue 32 item 8).
TEST_F(InProcessTest, APartnerStillInAnEarlierRoundIsWaitedForUpToTheDeadline) {
  options_.chunk_bytes = 4096;
  options_.deadline = clock_.Now() + absl::Seconds(30);
  const absl::Time start = clock_.Now();
  std::vector<TransferOutcome> sent;
  std::thread sender([&] {
    OutgoingTransfer send{1, InProcessNetwork::Address(1), model_b_, 0,
                          kArena};
    sent = b_->Exchange(key_, {&send, 1}, {}, options_);
  });
  // Worker 2's first stream waits for the registration; the clock passes
  // its 5 s, and the wait sees it (its refusal is certain from then on).
  clock_.AwaitWaiters(1);
  const uint64_t waits = clock_.waits();
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(WaitFor([&] { return clock_.waits() > waits; },
                      absl::Seconds(10)));
  std::vector<TransferOutcome> received;
  std::thread receiver([&] {
    IncomingTransfer recv{2, scratch_a_, 0, kArena};
    received = a_->Exchange(key_, {}, {&recv, 1}, options_);
  });
  sender.join();
  // Without a second send, worker 1 would wait for its deadline.
  if (!sent.at(0).status.ok()) clock_.Advance(absl::Seconds(30));
  receiver.join();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_TRUE(sent[0].status.ok()) << sent[0].status;
  EXPECT_TRUE(received[0].status.ok()) << received[0].status;
  EXPECT_EQ(scratch_a_, model_b_);
  EXPECT_GE(sent[0].seconds, 6.0);
  EXPECT_EQ(clock_.Now() - start, absl::Seconds(6));
}

}  // namespace
}  // namespace gasloc
