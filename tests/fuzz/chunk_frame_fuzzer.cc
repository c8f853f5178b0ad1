// Fuzz target: ChunkFrame::Parse (server/chunk_frame.h), the zero-copy
// reader of every Peer.Exchange message a peer receives, on any bytes cut
// into any slices, as a broken or hostile peer and gRPC's own framing
// could deliver them. The input's first byte gives the number of cuts
// (0-7), then one uint16 offset per cut; the rest is the message. Properties,
// each a crash:
//   - a frame that parses is what protobuf reads from the same bytes: the
//     same header, last flag and payload (the views over the slices, put
//     together), and payload_bytes() is the payload's size;
//   - a frame that does not parse says INVALID_ARGUMENT;
//   - sending it back (ChunkFrame::Take, Serialize) gives the bytes
//     protobuf writes for the same chunk, with the payload slice the
//     chunk's own buffer.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gasloc/v1/peer.pb.h"
#include "server/chunk_frame.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_seeds.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc::fuzz {
namespace {

// The message bytes cut at `cuts` (offsets into it, any order, clamped).
grpc::ByteBuffer Sliced(const std::string& message,
                        std::vector<size_t> cuts) {
  for (size_t& c : cuts) c = std::min(c, message.size());
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(message.size());
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t c : cuts) {
    slices.emplace_back(message.data() + at, c - at);
    at = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Joined(PayloadPieces pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

void CheckFrame(const std::string& message, const ChunkFrame& frame) {
  if (!frame.status().ok()) {
    GASLOC_FUZZ_CHECK(absl::IsInvalidArgument(frame.status()),
                      frame.status().ToString());
    return;
  }
  v1::ExchangeChunk ref;
  GASLOC_FUZZ_CHECK(ref.ParseFromString(message),
                    "the frame parsed bytes protobuf refuses");
  GASLOC_FUZZ_CHECK(frame.has_header() == ref.has_header(), "has_header");
  GASLOC_FUZZ_CHECK(frame.header().SerializeAsString() ==
                        ref.header().SerializeAsString(),
                    absl::StrCat("header ", frame.header().ShortDebugString(),
                                 " vs ", ref.header().ShortDebugString()));
  GASLOC_FUZZ_CHECK(frame.last() == ref.last(), "last");
  const std::string payload = Joined(frame.payload());
  GASLOC_FUZZ_CHECK(payload == ref.payload(),
                    absl::StrCat("payload of ", payload.size(), " bytes vs ",
                                 ref.payload().size()));
  GASLOC_FUZZ_CHECK(frame.payload_bytes() == ref.payload().size(),
                    absl::StrCat(frame.payload_bytes(), " payload bytes"));
  // Back onto the wire: protobuf's bytes for the chunk the frame holds.
  v1::ExchangeChunk again = frame.HeaderChunk();
  again.set_payload(payload);
  const std::string want = again.SerializeAsString();
  const ChunkFrame out = ChunkFrame::Take(std::move(again));
  grpc::ByteBuffer buffer;
  GASLOC_FUZZ_CHECK(out.Serialize(&buffer).ok(), "Serialize");
  GASLOC_FUZZ_CHECK(Flat(buffer) == want, "re-sent bytes differ");
}

}  // namespace

// Well-formed chunks as EncodeChunk makes them (fp32, bf16, the last
// chunk), whole and cut into slices at awkward places.
void WriteSeeds(SeedWriter& seeds) {
  std::vector<float> arena(40);
  for (size_t i = 0; i < arena.size(); ++i) arena[i] = 0.25f * i - 3.0f;
  int n = 0;
  for (v1::WireEncoding encoding :
       {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    for (bool last : {false, true}) {
      ChunkContext context;
      context.sender_id = 7;
      context.range_end = arena.size();
      context.encoding = encoding;
      context.arena_elements = arena.size();
      v1::ExchangeChunk chunk;
      const absl::Status status = EncodeChunk(
          context, arena, ChunkSpan{.offset = 8, .length = 24}, last, &chunk);
      GASLOC_FUZZ_CHECK(status.ok(), status.ToString());
      const std::string message = chunk.SerializeAsString();
      for (const std::vector<uint16_t>& cuts :
           std::vector<std::vector<uint16_t>>{
               {}, {1}, {static_cast<uint16_t>(message.size() / 2), 3,
                         static_cast<uint16_t>(message.size() - 1)}}) {
        FuzzOutput out;
        out.Put<uint8_t>(static_cast<uint8_t>(cuts.size()));
        for (uint16_t c : cuts) out.Put<uint16_t>(c);
        seeds.Add(absl::StrCat("chunk_", n++), out.bytes() + message);
      }
    }
  }
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gasloc;
  fuzz::FuzzInput in(data, size);
  const int cuts = in.Take<uint8_t>() % 8;
  std::vector<size_t> offsets;
  for (int i = 0; i < cuts; ++i) offsets.push_back(in.Take<uint16_t>());
  const size_t header = 1 + 2 * static_cast<size_t>(cuts);
  const std::string message(
      reinterpret_cast<const char*>(data) + std::min(header, size),
      size - std::min(header, size));
  const grpc::ByteBuffer buffer = fuzz::Sliced(message, offsets);
  ChunkFrame frame;
  frame.Parse(buffer);
  fuzz::CheckFrame(message, frame);
  return 0;
}
