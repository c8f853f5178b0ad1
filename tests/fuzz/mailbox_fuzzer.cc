// Fuzz target: any sequence of what the receive side of the exchange sees:
// registrations (Expect), streams opened, chunks from the expected peer or
// anyone else (in order, out of order, overlapping, for other rounds,
// phases or jobs, with a bad checksum, a short payload or a NaN), streams
// ended or cut, Await, FinishRound, Abandon, the clock moving and Shutdown.
// The input is a list of operations in the FuzzInput format (fuzz_bytes.h;
// make_fuzz_seeds.cc writes well-formed ones). Time is a FakeClock with
// auto-advance, so every wait ends at once at its deadline and nothing
// blocks. Properties, each a crash:
//   - a failed Expect registers nothing;
//   - a transfer whose stream reported committed() is committed by Await;
//   - a committed transfer's buffer holds exactly the sender's values over
//     its whole range (every element arrived), whatever the encoding;
//   - no receive buffer is ever written outside its range.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_seeds.h"
#include "worker/exchange/mailbox.h"

namespace gasloc::fuzz {
namespace {

constexpr float kSentinel = -12345.0f;

// One operation of the input: its first byte, modulo kCount.
enum class MailboxOp : uint8_t {
  kExpect, kOpenStream, kAccept, kEndStream, kAwait, kFinishRound,
  kAbandon, kAdvance, kShutdown, kCount
};

struct Receive {
  TransferKey key;
  uint64_t peer = 0;
  uint64_t begin = 0, end = 0;
  std::vector<float> buffer = std::vector<float>(kMailboxArena, kSentinel);
  bool expect_commit = false;
  bool awaited = false;
};

// GASLOC_FUZZ_TRACE=1 prints every registration, refused chunk and
// outcome (to replay a crashing input: docs/fuzzing.md).
const bool kTrace = std::getenv("GASLOC_FUZZ_TRACE") != nullptr;

bool SameKey(const TransferKey& a, const TransferKey& b) {
  return a.job_id == b.job_id && a.round == b.round && a.phase == b.phase &&
         a.step == b.step;
}

class MailboxFuzz {
 public:
  MailboxFuzz(FuzzInput& in) : in_(in) {
    clock_.SetAutoAdvance(true);
    MailboxOptions options;
    options.self_id = kMailboxSelf;
    options.early_chunk_wait = absl::Milliseconds(in_.TakeInRange(0, 50));
    options.remembered_transfers = in_.TakeInRange(1, 8);
    options.clock = &clock_;
    mailbox_ = std::make_unique<Mailbox>(options);
  }

  void Run() {
    for (int ops = 0; !in_.empty() && ops < 256; ++ops) {
      const uint8_t op = in_.Take<uint8_t>() %
                         static_cast<uint8_t>(MailboxOp::kCount);
      switch (static_cast<MailboxOp>(op)) {
        case MailboxOp::kExpect: Expect(); break;
        case MailboxOp::kOpenStream:
          if (streams_.size() < 4) streams_.push_back(mailbox_->OpenStream());
          break;
        case MailboxOp::kAccept: Accept(); break;
        case MailboxOp::kEndStream: EndStream(); break;
        case MailboxOp::kAwait: Await(PickOpen()); break;
        case MailboxOp::kFinishRound:
          mailbox_->FinishRound(PickJob(), in_.TakeInRange(0, 3));
          break;
        case MailboxOp::kAbandon:
          if (Receive* r = PickOpen())
            mailbox_->Abandon(r->key, r->peer,
                              absl::UnavailableError("peer refused"));
          break;
        case MailboxOp::kAdvance:
          clock_.Advance(absl::Milliseconds(in_.TakeInRange(0, 3000)));
          break;
        case MailboxOp::kShutdown: mailbox_->Shutdown(); break;
        case MailboxOp::kCount: break;
      }
    }
    for (auto& stream : streams_) stream->End();
    streams_.clear();
    for (auto& r : receives_)
      if (!r->awaited) Await(r.get());
    mailbox_.reset();
    for (auto& r : receives_) CheckOutsideRange(*r);
  }

 private:
  uint64_t PickJob() { return in_.TakeBool() ? kMailboxJob + 1 : kMailboxJob; }
  TransferKey PickKey() {
    static constexpr v1::ExchangePhase kPhases[] = {
        v1::EXCHANGE_PHASE_GOSSIP, v1::EXCHANGE_PHASE_REDUCE_SCATTER,
        v1::EXCHANGE_PHASE_ALL_GATHER};
    TransferKey key;
    key.job_id = PickJob();
    key.round = in_.TakeInRange(0, 3);
    key.phase = kPhases[in_.TakeInRange(0, 2)];
    key.step = static_cast<uint32_t>(in_.TakeInRange(0, 1));
    return key;
  }
  // A registered receive not awaited yet, or null.
  Receive* PickOpen() {
    std::vector<Receive*> open;
    for (auto& r : receives_)
      if (!r->awaited) open.push_back(r.get());
    if (open.empty()) return nullptr;
    return open[in_.TakeInRange(0, open.size() - 1)];
  }

  void Expect() {
    const TransferKey key = PickKey();
    const size_t n = in_.TakeInRange(1, 3);
    std::vector<std::unique_ptr<Receive>> made;
    std::vector<IncomingTransfer> receives;
    for (size_t i = 0; i < n; ++i) {
      auto r = std::make_unique<Receive>();
      r->key = key;
      r->peer = in_.TakeInRange(1, 4);
      r->begin = in_.TakeInRange(0, kMailboxArena + 6);
      r->end = in_.TakeInRange(0, kMailboxArena + 6);
      receives.push_back({r->peer, r->buffer, r->begin, r->end});
      made.push_back(std::move(r));
    }
    const size_t pending_before = mailbox_->pending();
    const absl::Status status = mailbox_->Expect(
        key, receives,
        clock_.Now() + absl::Milliseconds(in_.TakeInRange(0, 2000)));
    if (kTrace)
      std::fprintf(stderr, "expect %s (%zu receives): %s\n",
                   DescribeKey(key).c_str(), n, status.ToString().c_str());
    if (!status.ok()) {
      GASLOC_FUZZ_CHECK(mailbox_->pending() == pending_before,
                        "a failed Expect registered something: " +
                            status.ToString());
      return;
    }
    for (auto& r : made) receives_.push_back(std::move(r));
  }

  // A chunk for a registered receive (usually) or for a key of the
  // fuzzer's choosing, possibly damaged.
  v1::ExchangeChunk MakeChunk() {
    Receive* target = in_.TakeBool() ? PickOpen() : nullptr;
    const TransferKey key = target != nullptr ? target->key : PickKey();
    v1::ExchangeChunk chunk;
    v1::ChunkHeader* h = chunk.mutable_header();
    h->set_job_id(key.job_id);
    h->set_round(key.round);
    h->set_phase(key.phase);
    h->set_step(key.step);
    h->set_sender_id(target != nullptr && in_.TakeBool()
                         ? target->peer
                         : in_.TakeInRange(0, 5));
    const bool own_range = target != nullptr && in_.TakeBool();
    h->set_range_begin(own_range ? target->begin : in_.TakeInRange(0, 70));
    h->set_range_end(own_range ? target->end : in_.TakeInRange(0, 70));
    h->set_offset(in_.TakeInRange(0, 70));
    h->set_length(static_cast<uint32_t>(in_.TakeInRange(0, 40)));
    const bool bf16 = in_.TakeBool();
    h->set_encoding(bf16 ? v1::WIRE_ENCODING_BF16 : v1::WIRE_ENCODING_FP32);
    h->set_arena_elements(in_.TakeBool() ? kMailboxArena + 1 : kMailboxArena);
    chunk.set_last(in_.TakeBool());
    // The sender's values for the span (zeros past the arena's end).
    std::vector<float> values(h->length(), 0.0f);
    for (uint32_t i = 0; i < h->length(); ++i)
      if (h->offset() + i < kMailboxArena)
        values[i] = source_[h->offset() + i];
    switch (in_.TakeInRange(0, 5)) {
      case 0: if (!values.empty()) values[0] = std::nanf(""); break;
      case 1: if (!values.empty()) values.back() = INFINITY; break;
      default: break;
    }
    std::string* payload = chunk.mutable_payload();
    (void)EncodePayload(values, h->encoding(), payload);
    h->set_crc32c(Crc32c(payload->data(), payload->size()));
    switch (in_.TakeInRange(0, 5)) {
      case 0: h->set_crc32c(h->crc32c() ^ 1u); break;
      case 1: if (!payload->empty()) payload->pop_back(); break;
      default: break;
    }
    return chunk;
  }

  void Accept() {
    if (streams_.empty()) return;
    const size_t s = in_.TakeInRange(0, streams_.size() - 1);
    const v1::ExchangeChunk chunk = MakeChunk();
    Mailbox::InboundStream& stream = *streams_[s];
    const bool committed_before = stream.committed();
    const absl::Status status = stream.Accept(
        chunk, clock_.Now() + absl::Milliseconds(in_.TakeInRange(0, 100)));
    // This chunk committed the stream's transfer: the open receive of its
    // key and sender (a receive of the same key registered after the
    // committed one was awaited is another transfer).
    if (!committed_before && stream.committed()) {
      for (auto& r : receives_)
        if (!r->awaited && r->peer == stream.sender_id() &&
            SameKey(r->key, stream.key()))
          r->expect_commit = true;
    }
    if (kTrace)
      std::fprintf(stderr, "chunk [%lu, +%u) from %lu: %s\n",
                   chunk.header().offset(), chunk.header().length(),
                   chunk.header().sender_id(), status.ToString().c_str());
    if (!status.ok()) {
      // A refused chunk ends its stream (the transport's contract).
      stream.End(status);
      streams_.erase(streams_.begin() + s);
    }
  }

  void EndStream() {
    if (streams_.empty()) return;
    const size_t s = in_.TakeInRange(0, streams_.size() - 1);
    if (in_.TakeBool()) {
      streams_[s]->End();
    } else {
      streams_[s]->End(absl::CancelledError("client cancelled"));
    }
    streams_.erase(streams_.begin() + s);
  }

  void Await(Receive* r) {
    if (r == nullptr) return;
    const TransferOutcome outcome = mailbox_->Await(r->key, r->peer);
    r->awaited = true;
    if (kTrace)
      std::fprintf(stderr, "await %s from %lu [%lu, %lu): %s\n",
                   DescribeKey(r->key).c_str(), r->peer, r->begin, r->end,
                   outcome.status.ToString().c_str());
    if (r->expect_commit)
      GASLOC_FUZZ_CHECK(outcome.status.ok(),
                        "a committed stream's transfer failed: " +
                            outcome.status.ToString());
    CheckOutsideRange(*r);
    if (!outcome.status.ok()) return;
    for (uint64_t i = r->begin; i < r->end; ++i)
      GASLOC_FUZZ_CHECK(r->buffer[i] == source_[i],
                        absl::StrCat("committed element ", i, " is ",
                                     r->buffer[i], ", the sender sent ",
                                     source_[i]));
  }

  void CheckOutsideRange(const Receive& r) {
    for (uint64_t i = 0; i < kMailboxArena; ++i)
      if (i < r.begin || i >= r.end)
        GASLOC_FUZZ_CHECK(r.buffer[i] == kSentinel,
                          absl::StrCat("element ", i, " outside [", r.begin,
                                       ", ", r.end, ") was written"));
  }

  FuzzInput& in_;
  FakeClock clock_;
  const std::vector<float> source_ = SourceArena(kMailboxArena);
  // Declared before the mailbox: buffers outlive it.
  std::deque<std::unique_ptr<Receive>> receives_;
  std::unique_ptr<Mailbox> mailbox_;
  std::vector<std::unique_ptr<Mailbox::InboundStream>> streams_;
};

// Writes inputs in the order MailboxFuzz reads them: each method mirrors
// one operation's Take calls (with the choices an honest sender makes).
class MailboxSeed {
 public:
  struct Range {
    uint64_t peer, begin, end;
  };
  MailboxSeed() {
    out_.PutInRange(0, 0);  // early_chunk_wait 0 ms
    out_.PutInRange(1, 8);  // remembered transfers
  }
  // A receive of job kMailboxJob, round `round`, GOSSIP step 0.
  MailboxSeed& Expect(uint64_t round, std::vector<Range> ranges) {
    Op(MailboxOp::kExpect);
    out_.PutBool(false);  // job kMailboxJob
    out_.PutInRange(0, round);
    out_.PutInRange(0, 0);  // GOSSIP
    out_.PutInRange(0, 0);  // step
    out_.PutInRange(1, ranges.size());
    for (const Range& r : ranges) {
      out_.PutInRange(1, r.peer);
      out_.PutInRange(0, r.begin);
      out_.PutInRange(0, r.end);
    }
    out_.PutInRange(0, 1000);  // deadline in ms
    return *this;
  }
  MailboxSeed& Open() { return Op(MailboxOp::kOpenStream); }
  // The chunk [offset, offset + length) of open receive `receive` (its
  // peer, its range) on stream `stream`, of `streams` open.
  MailboxSeed& Chunk(size_t stream, size_t streams, size_t receive,
                     size_t receives, uint64_t offset, uint32_t length,
                     bool last, bool bf16 = false) {
    Op(MailboxOp::kAccept);
    out_.PutInRange(0, streams > 1 ? stream : 0);
    out_.PutBool(true);  // aimed at a registered receive
    out_.PutInRange(0, receives > 1 ? receive : 0);
    out_.PutBool(true);  // from its peer
    out_.PutBool(true);  // with its range
    out_.PutInRange(0, offset);
    out_.PutInRange(0, length);
    out_.PutBool(bf16);
    out_.PutBool(false);  // arena size right
    out_.PutBool(last);
    out_.PutInRange(0, 5);  // values intact
    out_.PutInRange(0, 5);  // checksum and size intact
    out_.PutInRange(0, 50);  // registration wait in ms
    return *this;
  }
  MailboxSeed& Await(size_t receive) {
    Op(MailboxOp::kAwait);
    out_.PutInRange(0, receive);
    return *this;
  }
  MailboxSeed& Advance(uint64_t ms) {
    Op(MailboxOp::kAdvance);
    out_.PutInRange(0, ms);
    return *this;
  }
  const std::string& bytes() const { return out_.bytes(); }

 private:
  MailboxSeed& Op(MailboxOp op) {
    out_.Put<uint8_t>(static_cast<uint8_t>(op));
    return *this;
  }
  FuzzOutput out_;
};

}  // namespace

void WriteSeeds(SeedWriter& seeds) {
  seeds.Add("commit_two_chunks",
            MailboxSeed()
                .Expect(1, {{2, 8, 40}})
                .Open()
                .Chunk(0, 1, 0, 1, 8, 16, false)
                .Chunk(0, 1, 0, 1, 24, 16, true)
                .Await(0)
                .bytes());
  seeds.Add("commit_two_peers_bf16",
            MailboxSeed()
                .Expect(2, {{2, 0, 32}, {3, 32, 64}})
                .Open()
                .Open()
                .Chunk(0, 2, 0, 2, 0, 32, true, true)
                .Chunk(1, 2, 1, 2, 32, 32, true, true)
                .Await(1)
                .Await(0)
                .bytes());
  seeds.Add("gap_then_deadline",
            MailboxSeed()
                .Expect(1, {{2, 8, 40}})
                .Open()
                .Chunk(0, 1, 0, 1, 8, 8, false)
                .Chunk(0, 1, 0, 1, 20, 20, true)
                .Advance(2000)
                .Await(0)
                .bytes());
  seeds.Add("next_round_after_commit",
            MailboxSeed()
                .Expect(1, {{2, 0, 16}})
                .Open()
                .Chunk(0, 1, 0, 1, 0, 16, true)
                .Await(0)
                .Expect(2, {{2, 0, 16}})
                .Open()
                .Chunk(1, 2, 0, 1, 0, 16, true)
                .Await(0)
                .bytes());
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gasloc::fuzz::FuzzInput in(data, size);
  gasloc::fuzz::MailboxFuzz(in).Run();
  return 0;
}
