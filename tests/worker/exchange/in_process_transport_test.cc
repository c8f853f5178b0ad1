// The in-process transport: a gossip pair in both directions at once, a
// ring-style segment exchange, bf16, and every injected fault ending in the
// documented status within the deadline.
#include "worker/exchange/in_process_transport.h"

#include <cmath>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

MailboxOptions ShortWait() {
  MailboxOptions options;
  options.early_chunk_wait = absl::Seconds(5);
  return options;
}

struct PairResult {
  std::vector<TransferOutcome> a, b;
};

class InProcessTest : public ::testing::Test {
 protected:
  InProcessTest()
      : net_(ShortWait()),
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
    options_.deadline = absl::Now() + timeout;
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

  TransferKey key_{9, 1, v1::EXCHANGE_PHASE_GOSSIP, 0};
  ExchangeOptions options_;
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
  options_.deadline = absl::Now() + absl::Seconds(10);
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
  const absl::Time start = absl::Now();
  PairResult r = Swap(absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.a[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.a[1].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.b[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Milliseconds(1300));
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
  const absl::Time start = absl::Now();
  PairResult r = Swap();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  for (const auto& o : r.a) EXPECT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(scratch_a_, model_b_);
}

TEST_F(InProcessTest, SilentPeerMeansDeadlineExceededOnBothSides) {
  net_.AddFault(InProcessFault::Silent(2, 0));
  const absl::Time start = absl::Now();
  PairResult r = Swap(absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1300));
  EXPECT_EQ(r.a[1].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.b[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(r.a[0].status.ok());
}

TEST_F(InProcessTest, PeerPastTheRoundIsGivenUpAtOnceNotAtTheDeadline) {
  // Worker 2 already gave up on round 1 (its own deadline passed): it
  // refuses worker 1's late transfer and will not send. Worker 1 must not
  // wait its whole deadline for data that cannot come.
  b_->mailbox().FinishRound(key_.job_id, key_.round);
  options_.chunk_bytes = 4096;
  options_.deadline = absl::Now() + absl::Seconds(5);
  OutgoingTransfer send{2, InProcessNetwork::Address(2), model_a_, 0, kArena};
  IncomingTransfer recv{2, scratch_a_, 0, kArena};
  const absl::Time start = absl::Now();
  auto out = a_->Exchange(key_, {&send, 1}, {&recv, 1}, options_);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out[1].status.message(), HasSubstr("will not come"));
  EXPECT_EQ(scratch_a_, std::vector<float>(kArena, 0.0f));
}

TEST_F(InProcessTest, UnknownPeerIsUnavailable) {
  options_.deadline = absl::Now() + absl::Seconds(1);
  OutgoingTransfer send{42, "inproc:42", model_a_, 0, kArena};
  auto out = a_->Exchange(key_, {&send, 1}, {}, options_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gasloc
