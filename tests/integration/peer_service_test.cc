// The Peer service and the gRPC transport on real loopback sockets (servers
// on 127.0.0.1 port 0 inside the test process): a gossip swap in both
// directions at once, every kind of bad input getting its status code
// without ever committing (the good transfer still commits afterwards when
// the bad chunk could not be bound to it), cut and hung streams, absent
// peers within 2x the deadline, FetchModel and Ping.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gasloc/v1/peer.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "server/grpc_peer_transport.h"
#include "server/peer_service.h"
#include "server/server_runner.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_auth.h"
#include "tests/support/wait_for.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

constexpr size_t kArena = 50000;

// One worker's networking: mailbox, Peer service on a loopback port, and
// the gRPC transport.
// `options` with the test's accept-everyone authenticator unless it sets
// one.
PeerServiceOptions WithInsecureAuth(PeerServiceOptions options) {
  if (options.authenticator == nullptr) {
    const PeerServiceOptions insecure = testing::InsecurePeerServiceOptions();
    options.authenticator = insecure.authenticator;
    options.roster = insecure.roster;
  }
  return options;
}

struct Node {
  explicit Node(uint64_t id, PeerServiceOptions service_options = {})
      : mailbox(Options(id)),
        service(&mailbox, WithInsecureAuth(std::move(service_options))),
        runner(ServerOptions{.listen_address = "127.0.0.1:0",
                             .credentials = testing::InsecureCredentials(),
                             .max_receive_message_bytes = 8 << 20}),
        transport(GrpcPeerTransportOptions{.mailbox = &mailbox,
                                           .credentials =
                                               testing::InsecureCredentials(),
                                           .max_message_bytes = 8 << 20}) {
    runner.AddService(&service);
    auto port = runner.Start();
    EXPECT_TRUE(port.ok()) << port.status();
    address = absl::StrCat("127.0.0.1:", port.ok() ? *port : 0);
  }
  static MailboxOptions Options(uint64_t id) {
    MailboxOptions options;
    options.self_id = id;
    options.early_chunk_wait = absl::Seconds(5);
    return options;
  }
  Mailbox mailbox;
  PeerService service;
  ServerRunner runner;
  GrpcPeerTransport transport;
  std::string address;
};

std::vector<float> Model(float base) {
  std::vector<float> v(kArena);
  for (size_t i = 0; i < kArena; ++i)
    v[i] = base + 0.25f * std::sin(static_cast<float>(i));
  return v;
}

class PeerServiceTest : public ::testing::Test {
 protected:
  PeerServiceTest()
      : a_(1), b_(2), model_a_(Model(1)), model_b_(Model(2)),
        scratch_(kArena, -7.0f) {}

  // What a correct worker 1 would send to worker 2 for key_.
  std::vector<v1::ExchangeChunk> Chunks(uint64_t begin = 0,
                                        uint64_t end = kArena) {
    auto plan = PlanChunks(begin, end, v1::WIRE_ENCODING_FP32, 64 << 10);
    EXPECT_TRUE(plan.ok());
    ChunkContext context{.key = key_,
                         .sender_id = 1,
                         .range_begin = begin,
                         .range_end = end,
                         .encoding = v1::WIRE_ENCODING_FP32,
                         .arena_elements = kArena};
    std::vector<v1::ExchangeChunk> chunks(plan->size());
    for (size_t i = 0; i < plan->size(); ++i)
      EXPECT_TRUE(EncodeChunk(context, model_a_, (*plan)[i],
                              i + 1 == plan->size(), &chunks[i])
                      .ok());
    return chunks;
  }

  // Streams `chunks` to worker 2 on a raw stub. `cancel_after`: cancel the
  // RPC after that many chunks instead of finishing; `hang`: then keep the
  // stream open without writing until the deadline.
  grpc::Status SendRaw(const std::vector<v1::ExchangeChunk>& chunks,
                       bool writes_done = true, int cancel_after = -1) {
    auto channel = grpc::CreateChannel(b_.address,
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::Peer::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    auto stream = stub->Exchange(&context);
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (static_cast<int>(i) == cancel_after) {
        // Let the chunks written so far reach the receiver first: a stream
        // cancelled before the server saw it is indistinguishable from a
        // peer that never showed up (that case ends at the deadline and is
        // tested separately). The last element they carry has landed in
        // the receiver's buffer (scratch_, -7 before).
        const size_t last = std::min<size_t>(
            scratch_.size(), chunks[i - 1].header().offset() +
                                 chunks[i - 1].header().length()) - 1;
        WaitFor([&] { return std::atomic_ref<float>(scratch_[last]).load() !=
                             -7.0f; },
                absl::Seconds(5));
        context.TryCancel();
        return stream->Finish();
      }
      if (!stream->Write(chunks[i])) break;
    }
    if (writes_done) stream->WritesDone();
    v1::ExchangeChunk ack;
    while (stream->Read(&ack)) {
    }
    return stream->Finish();
  }

  void Register(absl::Duration timeout = absl::Seconds(5)) {
    IncomingTransfer in{.peer_id = 1, .buffer = scratch_,
                        .range_begin = 0, .range_end = kArena};
    ASSERT_TRUE(b_.mailbox.Expect(key_, {&in, 1}, absl::Now() + timeout).ok());
  }
  TransferOutcome Await() { return b_.mailbox.Await(key_, 1); }

  // The bad stream is refused with `code`, and the transfer it targeted
  // never commits.
  void ExpectRejectedAndNeverCommitted(std::vector<v1::ExchangeChunk> bad,
                                       grpc::StatusCode code,
                                       const char* message) {
    Register();
    grpc::Status s = SendRaw(bad);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(message));
    TransferOutcome out = Await();
    EXPECT_FALSE(out.status.ok());
    EXPECT_EQ(static_cast<int>(out.status.code()), static_cast<int>(code));
  }

  // The bad stream is refused with `code` and cannot touch the registered
  // transfer: nothing is written, and the real sender still commits.
  void ExpectRejectedAndHarmless(std::vector<v1::ExchangeChunk> bad,
                                 grpc::StatusCode code, const char* message) {
    ExpectSendRejectedAndHarmless([&] { return SendRaw(bad); }, code,
                                  message);
  }
  // The same for any stream `send_bad` sends.
  void ExpectSendRejectedAndHarmless(
      const std::function<grpc::Status()>& send_bad, grpc::StatusCode code,
      const char* message) {
    Register();
    const absl::Time start = absl::Now();
    grpc::Status s = send_bad();
    EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "not at once";
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(message));
    EXPECT_EQ(scratch_, std::vector<float>(kArena, -7.0f));
    grpc::Status good = SendRaw(Chunks());
    EXPECT_TRUE(good.ok()) << good.error_message();
    TransferOutcome out = Await();
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(scratch_, model_a_);
  }

  TransferKey key_{.job_id = 4,
                   .round = 12,
                   .phase = v1::EXCHANGE_PHASE_GOSSIP,
                   .step = 0};
  Node a_, b_;
  std::vector<float> model_a_, model_b_, scratch_;
};

TEST_F(PeerServiceTest, GossipPairStreamsBothDirectionsAtOnce) {
  for (auto encoding : {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    key_.round++;
    std::vector<float> scratch_a(kArena), scratch_b(kArena);
    ExchangeOptions options;
    options.encoding = encoding;
    options.chunk_bytes = 32 << 10;
    options.deadline = absl::Now() + absl::Seconds(10);
    std::vector<TransferOutcome> out_a, out_b;
    std::thread other([&] {
      OutgoingTransfer send{.peer_id = 1, .address = a_.address,
                            .data = model_b_, .range_begin = 0,
                            .range_end = kArena};
      IncomingTransfer recv{.peer_id = 1, .buffer = scratch_b,
                            .range_begin = 0, .range_end = kArena};
      out_b = b_.transport.Exchange(key_, {&send, 1}, {&recv, 1}, options);
    });
    OutgoingTransfer send{.peer_id = 2, .address = b_.address, .data = model_a_,
                          .range_begin = 0, .range_end = kArena};
    IncomingTransfer recv{.peer_id = 2, .buffer = scratch_a,
                          .range_begin = 0, .range_end = kArena};
    out_a = a_.transport.Exchange(key_, {&send, 1}, {&recv, 1}, options);
    other.join();
    const size_t bytes = kArena * (encoding == v1::WIRE_ENCODING_BF16 ? 2 : 4);
    for (const auto* outs : {&out_a, &out_b}) {
      ASSERT_EQ(outs->size(), 2u);
      for (const auto& o : *outs) {
        EXPECT_TRUE(o.status.ok()) << o.status;
        EXPECT_EQ(o.bytes, bytes);
      }
    }
    for (size_t i = 0; i < kArena; ++i) {
      const float want_a = encoding == v1::WIRE_ENCODING_FP32
                               ? model_b_[i]
                               : Bf16ToFloat(FloatToBf16(model_b_[i]));
      const float want_b = encoding == v1::WIRE_ENCODING_FP32
                               ? model_a_[i]
                               : Bf16ToFloat(FloatToBf16(model_a_[i]));
      ASSERT_EQ(scratch_a[i], want_a) << i;
      ASSERT_EQ(scratch_b[i], want_b) << i;
    }
  }
}

TEST_F(PeerServiceTest, WrongJobIsFailedPrecondition) {
  auto bad = Chunks();
  bad[0].mutable_header()->set_job_id(5);
  ExpectRejectedAndHarmless(bad, grpc::StatusCode::FAILED_PRECONDITION,
                            "expects job 4");
}

TEST_F(PeerServiceTest, WrongRoundIsFailedPrecondition) {
  auto bad = Chunks();
  bad[0].mutable_header()->set_round(11);
  ExpectRejectedAndHarmless(bad, grpc::StatusCode::FAILED_PRECONDITION,
                            "already finished");
}

TEST_F(PeerServiceTest, SenderTheScheduleDidNotNameIsFailedPrecondition) {
  auto bad = Chunks();
  for (auto& c : bad) c.mutable_header()->set_sender_id(9);
  ExpectRejectedAndHarmless(bad, grpc::StatusCode::FAILED_PRECONDITION,
                            "sender 9 is not a peer of worker 2 in round 12");
}

TEST_F(PeerServiceTest, OutOfRangeOffsetIsInvalidArgument) {
  auto bad = Chunks();
  bad[1].mutable_header()->set_offset(kArena - 10);
  ExpectRejectedAndNeverCommitted(bad, grpc::StatusCode::INVALID_ARGUMENT,
                                  "outside range");
}

TEST_F(PeerServiceTest, LengthMismatchIsInvalidArgument) {
  auto bad = Chunks();
  bad[0].mutable_header()->set_length(bad[0].header().length() - 1);
  ExpectRejectedAndNeverCommitted(bad, grpc::StatusCode::INVALID_ARGUMENT,
                                  "payload has");
}

TEST_F(PeerServiceTest, BadChecksumIsInvalidArgument) {
  auto bad = Chunks();
  (*bad[2].mutable_payload())[100] ^= 0x01;
  ExpectRejectedAndNeverCommitted(bad, grpc::StatusCode::INVALID_ARGUMENT,
                                  "bad checksum");
}

TEST_F(PeerServiceTest, NanIsInvalidArgument) {
  model_a_[20000] = std::numeric_limits<float>::quiet_NaN();
  ExpectRejectedAndNeverCommitted(Chunks(), grpc::StatusCode::INVALID_ARGUMENT,
                                  "element 20000 is not finite");
}

// Bytes that are not an ExchangeChunk (a good first chunk cut 100 bytes
// short, inside its payload) are refused by name, not taken for a cut
// stream, and bind no transfer: the honest sender still commits.
TEST_F(PeerServiceTest, MalformedMessageIsInvalidArgumentAndHarmless) {
  const std::string good = Chunks()[0].SerializeAsString();
  ExpectSendRejectedAndHarmless(
      [&] {
        // The Exchange method with raw bytes for messages.
        auto channel = grpc::CreateChannel(
            b_.address, grpc::InsecureChannelCredentials());
        grpc::ClientContext context;
        context.set_deadline(
            absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
        const grpc::internal::RpcMethod method(
            "/gasloc.v1.Peer/Exchange",
            grpc::internal::RpcMethod::BIDI_STREAMING, channel);
        std::unique_ptr<
            grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
            stream(grpc::internal::ClientReaderWriterFactory<
                   grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(),
                                                               method,
                                                               &context));
        grpc::Slice cut(good.substr(0, good.size() - 100));
        stream->Write(grpc::ByteBuffer(&cut, 1));
        stream->WritesDone();
        grpc::ByteBuffer reply;
        while (stream->Read(&reply)) {
        }
        return stream->Finish();
      },
      grpc::StatusCode::INVALID_ARGUMENT, "malformed ExchangeChunk message");
}

TEST_F(PeerServiceTest, StreamCutInTheMiddleNeverCommits) {
  auto chunks = Chunks();
  ASSERT_GE(chunks.size(), 3u);
  // Half-closed without the last chunk.
  Register();
  std::vector<v1::ExchangeChunk> first_two(chunks.begin(), chunks.begin() + 2);
  grpc::Status s = SendRaw(first_two);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  TransferOutcome out = Await();
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(out.status.message(), HasSubstr("without the last chunk"));
  // Cancelled by the client (a process that dies looks the same).
  key_.round = 13;
  chunks = Chunks();
  std::fill(scratch_.begin(), scratch_.end(), -7.0f);  // SendRaw watches it
  Register();
  s = SendRaw(chunks, true, /*cancel_after=*/2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  out = Await();
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(PeerServiceTest, SenderThatStopsMidStreamHitsTheDeadline) {
  Register(absl::Seconds(1));
  auto chunks = Chunks();
  auto channel =
      grpc::CreateChannel(b_.address, grpc::InsecureChannelCredentials());
  auto stub = v1::Peer::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  auto stream = stub->Exchange(&context);
  ASSERT_TRUE(stream->Write(chunks[0]));
  const absl::Time start = absl::Now();
  TransferOutcome out = Await();  // the sender goes quiet
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // Its next chunk is refused with the transfer's fate.
  stream->Write(chunks[1]);
  stream->WritesDone();
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
}

TEST_F(PeerServiceTest, AbsentPeerTimesOutWithinTwiceTheDeadline) {
  // Worker 1 gossips with worker 3, whose address has no listener and who
  // never sends.
  const std::string nowhere =
      absl::StrCat("127.0.0.1:", testing::PickFreePort());
  ExchangeOptions options;
  const absl::Duration deadline = absl::Seconds(1);
  const absl::Time start = absl::Now();
  options.deadline = start + deadline;
  OutgoingTransfer send{.peer_id = 3, .address = nowhere, .data = model_a_,
                        .range_begin = 0, .range_end = kArena};
  IncomingTransfer recv{.peer_id = 3, .buffer = scratch_,
                        .range_begin = 0, .range_end = kArena};
  auto out = a_.transport.Exchange(key_, {&send, 1}, {&recv, 1}, options);
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status.code(), absl::StatusCode::kUnavailable)
      << out[0].status;
  EXPECT_EQ(out[1].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(took, deadline);
  EXPECT_LT(took, 2 * deadline);
  EXPECT_EQ(scratch_, std::vector<float>(kArena, -7.0f));
}

TEST_F(PeerServiceTest, FetchModelStreamsParamsAndOuterState) {
  auto params = std::make_shared<std::vector<float>>(model_a_);
  auto outer = std::make_shared<std::vector<float>>(model_b_);
  b_.service.SetModelProvider(
      [&](uint64_t job) -> absl::StatusOr<ModelSnapshot> {
        if (job != 4) return absl::FailedPreconditionError("no such job");
        ModelSnapshot s;
        s.job_id = 4;
        s.round = 17;
        s.params = *params;
        s.outer_state = *outer;
        s.keep_alive = params;
        return s;
      });
  FetchModelOptions options;
  options.address = b_.address;
  options.job_id = 4;
  options.chunk_bytes = 48 << 10;
  options.deadline = absl::Now() + absl::Seconds(10);
  auto fetched = a_.transport.FetchModel(options);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->round, 17u);
  EXPECT_EQ(fetched->sender_id, 2u);
  EXPECT_EQ(fetched->params, model_a_);
  EXPECT_EQ(fetched->outer_state, model_b_);
  options.job_id = 5;
  EXPECT_EQ(a_.transport.FetchModel(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.address = a_.address;  // no provider installed
  EXPECT_EQ(a_.transport.FetchModel(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Server-side limits: a stream that sends nothing is cancelled at the idle
// deadline (it no longer holds a server thread until the dialer gives up),
// FetchModel calls per peer are capped, and chunk_bytes is bounded below
// and above.
TEST(PeerServiceLimits, SilentStreamsFetchCapsAndChunkBytes) {
  Node server(2, PeerServiceOptions{
                     .limits = {.idle_timeout = absl::Seconds(1),
                                .max_fetches_per_peer = 1}});
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(
      server.address, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    auto stream = stub->Exchange(&context);
    const absl::Time start = absl::Now();
    v1::ExchangeChunk ack;
    EXPECT_FALSE(stream->Read(&ack));  // the server ends it
    const grpc::Status status = stream->Finish();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    // gRPC's synchronous server can end a blocked read only by cancelling
    // the call: the dialer sees CANCELLED, the receiver logs why.
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
        << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("server side"));
  }
  // A model provider that blocks until released keeps one fetch open.
  absl::Notification release;
  std::atomic<bool> providing{false};
  server.service.SetModelProvider(
      [&](uint64_t job) -> absl::StatusOr<ModelSnapshot> {
        providing = true;
        release.WaitForNotificationWithTimeout(absl::Seconds(20));
        auto params = std::make_shared<std::vector<float>>(10, 1.0f);
        ModelSnapshot s;
        s.job_id = job;
        s.params = *params;
        s.keep_alive = params;
        return s;
      });
  v1::FetchModelRequest request;
  request.set_job_id(4);
  request.set_chunk_bytes(4);
  {
    grpc::ClientContext context;
    auto reader = stub->FetchModel(&context, request);
    v1::ExchangeChunk chunk;
    while (reader->Read(&chunk)) {
    }
    const grpc::Status tiny = reader->Finish();
    EXPECT_EQ(tiny.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(tiny.error_message(), HasSubstr("chunk_bytes"));
  }
  request.set_chunk_bytes(64 << 10);
  grpc::ClientContext first_context;
  auto first = stub->FetchModel(&first_context, request);
  // The first call is admitted (its provider runs).
  WaitFor([&] { return providing.load(); }, absl::Seconds(10));
  {
    grpc::ClientContext context;
    auto reader = stub->FetchModel(&context, request);
    v1::ExchangeChunk chunk;
    while (reader->Read(&chunk)) {
    }
    const grpc::Status second = reader->Finish();
    EXPECT_EQ(second.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << second.error_message();
  }
  release.Notify();
  v1::ExchangeChunk chunk;
  int chunks = 0;
  while (first->Read(&chunk)) ++chunks;
  EXPECT_TRUE(first->Finish().ok());
  EXPECT_GT(chunks, 0);
}

TEST_F(PeerServiceTest, PingReportsIdJobAndRound) {
  b_.service.SetRoundReporter([] { return std::pair<uint64_t, uint64_t>{4, 12}; });
  auto pong = a_.transport.Ping(b_.address, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(pong.ok()) << pong.status();
  EXPECT_EQ(pong->worker_id(), 2u);
  EXPECT_EQ(pong->job_id(), 4u);
  EXPECT_EQ(pong->round(), 12u);
}

}  // namespace
}  // namespace gasloc
