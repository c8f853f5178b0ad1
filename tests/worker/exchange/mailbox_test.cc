// The receive mailbox: commit rule, ordering, duplicate and gap rejection,
// early chunks, finished rounds, deadlines, and that nothing outside the
// transfer's range (or after a failure is reported) is written. Time is a
// FakeClock: a test reaches a deadline by moving it (or, with auto-advance,
// sees exactly how long the mailbox would have waited), never by sleeping.
#include "worker/exchange/mailbox.h"

#include <thread>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSelf = 3;
constexpr uint64_t kPeer = 7;
constexpr size_t kArena = 1000;

MailboxOptions Options(const Clock* clock) {
  MailboxOptions options;
  options.self_id = kSelf;
  options.early_chunk_wait = absl::Seconds(2);
  options.clock = clock;
  return options;
}

class MailboxTest : public ::testing::Test {
 protected:
  MailboxTest()
      : mailbox_(Options(&clock_)),
        source_(kArena),
        buffer_(kArena, -1.0f) {
    for (size_t i = 0; i < kArena; ++i) source_[i] = 0.5f * i;
  }

  absl::Status Register(absl::Duration timeout = absl::Seconds(10),
                        uint64_t begin = 100, uint64_t end = 900) {
    IncomingTransfer in{kPeer, buffer_, begin, end};
    return mailbox_.Expect(key_, {&in, 1}, clock_.Now() + timeout);
  }
  // The chunks a correct sender would send for [begin, end).
  std::vector<v1::ExchangeChunk> Chunks(uint64_t begin = 100,
                                        uint64_t end = 900,
                                        uint64_t sender = kPeer) {
    auto plan = PlanChunks(begin, end, v1::WIRE_ENCODING_FP32, 1024);
    EXPECT_TRUE(plan.ok());
    ChunkContext context{key_, sender, begin, end, v1::WIRE_ENCODING_FP32,
                         kArena};
    std::vector<v1::ExchangeChunk> chunks(plan->size());
    for (size_t i = 0; i < plan->size(); ++i)
      EXPECT_TRUE(EncodeChunk(context, source_, (*plan)[i],
                              i + 1 == plan->size(), &chunks[i])
                      .ok());
    return chunks;
  }
  absl::Time Soon() { return clock_.Now() + absl::Seconds(10); }
  // Feeds `first` to `stream` before its transfer is registered, registers
  // it while the chunk waits, and returns the chunk's Accept status.
  absl::Status AcceptBeforeTheRegistration(Mailbox::InboundStream& stream,
                                           const v1::ExchangeChunk& first) {
    absl::Status accepted = absl::UnknownError("not accepted");
    std::thread sender([&] { accepted = stream.Accept(first, Soon()); });
    clock_.AwaitWaiters(1);  // the first chunk waits for its registration
    EXPECT_TRUE(Register().ok());
    sender.join();
    return accepted;
  }
  void ExpectOutsideRangeUntouched() {
    for (size_t i = 0; i < 100; ++i) ASSERT_EQ(buffer_[i], -1.0f) << i;
    for (size_t i = 900; i < kArena; ++i) ASSERT_EQ(buffer_[i], -1.0f) << i;
  }

  TransferKey key_{4, 12, v1::EXCHANGE_PHASE_GOSSIP, 0};
  FakeClock clock_;
  Mailbox mailbox_;
  std::vector<float> source_;
  std::vector<float> buffer_;
};

TEST_F(MailboxTest, CommitsWhenEveryElementArrivedWithTheLastFlag) {
  ASSERT_TRUE(Register().ok());
  auto chunks = Chunks();
  ASSERT_EQ(chunks.size(), 4u);
  auto stream = mailbox_.OpenStream();
  for (const auto& c : chunks) ASSERT_TRUE(stream->Accept(c, Soon()).ok());
  EXPECT_TRUE(stream->committed());
  stream->End();
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_TRUE(out.incoming);
  EXPECT_EQ(out.peer_id, kPeer);
  EXPECT_EQ(out.bytes, 800u * 4);
  for (size_t i = 100; i < 900; ++i) ASSERT_EQ(buffer_[i], source_[i]);
  ExpectOutsideRangeUntouched();
  EXPECT_EQ(mailbox_.pending(), 0u);
}

// Wire time is the time the bytes were moving: from the first chunk taken
// in to the commit (scaled for the first chunk's own transfer), not the
// wait for a late peer (algorithms.md section 5).
TEST_F(MailboxTest, WireTimeLeavesOutTheWaitForThePeer) {
  ASSERT_TRUE(Register().ok());
  auto chunks = Chunks();
  ASSERT_EQ(chunks.size(), 4u);  // 1024 + 1024 + 1024 + 128 bytes
  clock_.Advance(absl::Seconds(5));  // the peer arrives 5 s late
  auto stream = mailbox_.OpenStream();
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(stream->Accept(chunks[i], Soon()).ok());
  }
  stream->End();
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_DOUBLE_EQ(out.seconds, 8);
  EXPECT_DOUBLE_EQ(out.wire_seconds, 3.0 * 3200 / (3200 - 1024));
}

TEST_F(MailboxTest, ASingleChunkHasNoWireTime) {
  ASSERT_TRUE(Register(absl::Seconds(10), 100, 200).ok());
  auto chunks = Chunks(100, 200);
  ASSERT_EQ(chunks.size(), 1u);
  clock_.Advance(absl::Seconds(1));
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  stream->End();
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.wire_seconds, 0) << "its own transfer time is not seen";
}

TEST_F(MailboxTest, StreamEndingWithoutLastChunkFailsUnavailable) {
  ASSERT_TRUE(Register().ok());
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  ASSERT_TRUE(stream->Accept(chunks[1], Soon()).ok());
  stream->End();
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(out.status.message(), HasSubstr("512 of 800 elements"));
  ExpectOutsideRangeUntouched();
}

TEST_F(MailboxTest, DuplicateOverlapAndGapAreRejected) {
  auto chunks = Chunks();
  {
    ASSERT_TRUE(Register().ok());
    auto stream = mailbox_.OpenStream();
    ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
    absl::Status dup = stream->Accept(chunks[0], Soon());
    EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(dup.message(), HasSubstr("overlaps"));
    EXPECT_EQ(mailbox_.Await(key_, kPeer).status.code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    key_.round = 13;
    chunks = Chunks();
    ASSERT_TRUE(Register().ok());
    auto stream = mailbox_.OpenStream();
    ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
    absl::Status gap = stream->Accept(chunks[2], Soon());
    EXPECT_EQ(gap.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(gap.message(), HasSubstr("skipping elements [356, 612)"));
    EXPECT_EQ(mailbox_.Await(key_, kPeer).status.code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(MailboxTest, LastFlagBeforeTheRangeIsCompleteFails) {
  ASSERT_TRUE(Register().ok());
  auto chunks = Chunks();
  chunks[1].set_last(true);
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  absl::Status s = stream->Accept(chunks[1], Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("last chunk ends at element 612"));
  EXPECT_FALSE(stream->committed());
  EXPECT_EQ(mailbox_.Await(key_, kPeer).status.code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(MailboxTest, BadChunkFailsTheTransferForGood) {
  ASSERT_TRUE(Register().ok());
  auto chunks = Chunks();
  (*chunks[1].mutable_payload())[3] ^= 0x10;
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  EXPECT_THAT(stream->Accept(chunks[1], Soon()).message(),
              HasSubstr("bad checksum"));
  // A second stream with perfect chunks cannot revive it.
  auto retry = mailbox_.OpenStream();
  auto fresh = Chunks();
  absl::Status s;
  for (const auto& c : fresh) {
    s = retry->Accept(c, Soon());
    if (!s.ok()) break;
  }
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(retry->committed());
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status.message(), HasSubstr("bad checksum"));
}

TEST_F(MailboxTest, EarlyChunkWaitsForTheRegistration) {
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  const absl::Time start = clock_.Now();
  ASSERT_TRUE(AcceptBeforeTheRegistration(*stream, chunks[0]).ok());
  for (size_t i = 1; i < chunks.size(); ++i)
    ASSERT_TRUE(stream->Accept(chunks[i], Soon()).ok());
  EXPECT_TRUE(mailbox_.Await(key_, kPeer).status.ok());
  EXPECT_EQ(clock_.Now(), start);  // the registration, not time, ended it
}

// A receiver that registers after its peer began sending is late: the
// peer's bytes sat in the socket and HTTP/2 buffers meanwhile and are taken
// in at memory speed, so first chunk to commit would read as a link many
// times faster than the real one (seen in the netns harness: 52 MB/s for a
// shaped 1 MB/s link). Such a receive has no wire time.
TEST_F(MailboxTest, ALateReceiverHasNoWireTime) {
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(AcceptBeforeTheRegistration(*stream, chunks[0]).ok());
  for (size_t i = 1; i < chunks.size(); ++i) {
    clock_.Advance(absl::Milliseconds(10));  // buffered: taken in at once
    ASSERT_TRUE(stream->Accept(chunks[i], Soon()).ok());
  }
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.wire_seconds, 0)
      << "bytes buffered before the registration say nothing of the link";
}

TEST_F(MailboxTest, ChunkNobodyRegistersIsRejectedAfterTheBoundedWait) {
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  clock_.SetAutoAdvance(true);
  const absl::Time start = clock_.Now();
  absl::Status s = stream->Accept(chunks[0], Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("expects no transfer"));
  EXPECT_EQ(clock_.Now() - start, absl::Seconds(2));  // early_chunk_wait
}

TEST_F(MailboxTest, EarlyWaitNeverOutlastsTheStreamDeadline) {
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  clock_.SetAutoAdvance(true);
  const absl::Time start = clock_.Now();
  EXPECT_EQ(stream->Accept(chunks[0], start + absl::Milliseconds(50)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(50));  // not 2 s
}

TEST_F(MailboxTest, FinishedRoundAndUnnamedSenderAreRejectedAtOnce) {
  ASSERT_TRUE(Register().ok());  // round 12: rounds < 12 are finished
  key_.round = 11;
  auto old_round = Chunks();
  key_.round = 12;
  auto stranger = Chunks(100, 900, /*sender=*/8);
  clock_.SetAutoAdvance(true);  // a wait would show as time passing
  const absl::Time start = clock_.Now();
  absl::Status s = mailbox_.OpenStream()->Accept(old_round[0], Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("already finished"));
  s = mailbox_.OpenStream()->Accept(stranger[0], Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("sender 8 is not a peer of worker 3 in round 12"));
  EXPECT_EQ(clock_.Now(), start);  // at once, not after the 2 s wait
  // The registered transfer is unharmed.
  auto stream = mailbox_.OpenStream();
  for (const auto& c : Chunks()) ASSERT_TRUE(stream->Accept(c, Soon()).ok());
  EXPECT_TRUE(mailbox_.Await(key_, kPeer).status.ok());
  // And FinishRound closes round 12 too.
  mailbox_.FinishRound(4, 12);
  EXPECT_EQ(mailbox_.OpenStream()->Accept(Chunks()[0], Soon()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Register().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(MailboxTest, WrongJobFromAnExpectedSenderIsRejectedAtOnce) {
  ASSERT_TRUE(Register().ok());
  key_.job_id = 5;
  auto other_job = Chunks();
  key_.job_id = 4;
  clock_.SetAutoAdvance(true);  // a wait would show as time passing
  const absl::Time start = clock_.Now();
  absl::Status s = mailbox_.OpenStream()->Accept(other_job[0], Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("expects job 4"));
  EXPECT_EQ(clock_.Now(), start);
}

TEST_F(MailboxTest, DeadlinePassesMidTransfer) {
  ASSERT_TRUE(Register(absl::Milliseconds(100)).ok());
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  clock_.SetAutoAdvance(true);
  const absl::Time start = clock_.Now();
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(out.status.message(), HasSubstr("256 of 800"));
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(100));  // the deadline
  // The late rest is refused and writes nothing.
  std::vector<float> before = buffer_;
  absl::Status late = stream->Accept(chunks[1], Soon());
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(buffer_, before);
  // A new stream for the ended transfer is refused at once.
  EXPECT_EQ(mailbox_.OpenStream()->Accept(chunks[0], Soon()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(MailboxTest, RegistrationErrors) {
  IncomingTransfer bad{kPeer, buffer_, 500, 1001};
  EXPECT_EQ(mailbox_.Expect(key_, {&bad, 1}, Soon()).code(),
            absl::StatusCode::kInvalidArgument);
  IncomingTransfer twice[2] = {{kPeer, buffer_, 0, 10},
                               {kPeer, buffer_, 10, 20}};
  EXPECT_EQ(mailbox_.Expect(key_, twice, Soon()).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Register().ok());
  EXPECT_EQ(Register().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(mailbox_.Await(key_, 99).status.code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(MailboxTest, ShutdownFailsOpenTransfersAndWakesWaitingChunks) {
  ASSERT_TRUE(Register().ok());
  auto chunks = Chunks();
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  key_.job_id = 77;  // nobody expects it: this chunk waits for a registration
  auto stray = Chunks(100, 900, /*sender=*/8);
  key_.job_id = 4;
  absl::Status waited;
  const absl::Time start = clock_.Now();
  std::thread early([&] {
    auto other = mailbox_.OpenStream();
    waited = other->Accept(stray[0], Soon());
  });
  clock_.AwaitWaiters(1);  // the stray chunk waits for a registration
  mailbox_.Shutdown();
  early.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(clock_.Now(), start);  // Shutdown ended the wait, not time
  EXPECT_EQ(stream->Accept(chunks[1], Soon()).code(),
            absl::StatusCode::kUnavailable);
  TransferOutcome out = mailbox_.Await(key_, kPeer);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(out.status.message(), HasSubstr("shutting down"));
  key_.round = 20;
  EXPECT_EQ(Register().code(), absl::StatusCode::kUnavailable);
}

TEST_F(MailboxTest, EmptyRangeCommitsOnItsSingleLastChunk) {
  ASSERT_TRUE(Register(absl::Seconds(10), 500, 500).ok());
  auto chunks = Chunks(500, 500);
  ASSERT_EQ(chunks.size(), 1u);
  auto stream = mailbox_.OpenStream();
  ASSERT_TRUE(stream->Accept(chunks[0], Soon()).ok());
  EXPECT_TRUE(mailbox_.Await(key_, kPeer).status.ok());
}

}  // namespace
}  // namespace gasloc
