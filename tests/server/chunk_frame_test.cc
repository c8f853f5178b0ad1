// ChunkFrame (server/chunk_frame.h): its bytes are protobuf's bytes for
// the same ExchangeChunk, the payload goes to gRPC as the encoder's own
// buffer (no copy), and a received message cut into slices anywhere
// parses to the same chunk; truncated or malformed messages are refused
// by name.
#include "server/chunk_frame.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

v1::ExchangeChunk SampleChunk(size_t payload_bytes, bool last) {
  v1::ExchangeChunk chunk;
  v1::ChunkHeader* h = chunk.mutable_header();
  h->set_job_id(7);
  h->set_round(300);
  h->set_sender_id(2);
  h->set_phase(v1::EXCHANGE_PHASE_GOSSIP);
  h->set_offset(1 << 20);
  h->set_length(static_cast<uint32_t>(payload_bytes / 4));
  h->set_range_end(25000000);
  h->set_encoding(v1::WIRE_ENCODING_FP32);
  h->set_crc32c(0xdeadbeef);
  h->set_arena_elements(25000000);
  std::string* payload = chunk.mutable_payload();
  for (size_t i = 0; i < payload_bytes; ++i)
    payload->push_back(static_cast<char>(i * 31 + 5));
  chunk.set_last(last);
  return chunk;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a ByteBuffer of slices cut at `cuts` (ascending offsets).
grpc::ByteBuffer Sliced(const std::string& bytes, std::vector<size_t> cuts) {
  cuts.push_back(bytes.size());
  std::vector<grpc::Slice> slices;
  size_t pos = 0;
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + pos, cut - pos);
    pos = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

ChunkFrame Parsed(const grpc::ByteBuffer& buffer) {
  ChunkFrame frame;
  frame.Parse(buffer);
  return frame;
}

TEST(ChunkFrame, SerialisesToProtobufsOwnBytes) {
  std::vector<v1::ExchangeChunk> chunks = {
      SampleChunk(1 << 20, false), SampleChunk(4096, true),
      SampleChunk(4, true), SampleChunk(0, false), v1::ExchangeChunk()};
  chunks.back().set_last(true);  // no header at all
  for (v1::ExchangeChunk& chunk : chunks) {
    const std::string reference = chunk.SerializeAsString();
    const ChunkFrame frame = ChunkFrame::Take(std::move(chunk));
    grpc::ByteBuffer buffer;
    ASSERT_TRUE(frame.Serialize(&buffer).ok());
    EXPECT_EQ(Bytes(buffer), reference);
  }
}

TEST(ChunkFrame, SendingHandsTheEncodersBufferToGrpcWithoutACopy) {
  v1::ExchangeChunk chunk = SampleChunk(1 << 20, true);
  const char* encoded = chunk.payload().data();
  const ChunkFrame frame = ChunkFrame::Take(std::move(chunk));
  ASSERT_EQ(frame.payload().size(), 1u);
  EXPECT_EQ(frame.payload()[0].data(), encoded);
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(frame.Serialize(&buffer).ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  // header + tag, the payload itself, the last flag.
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), encoded);
  EXPECT_EQ(slices[1].size(), size_t{1} << 20);
}

TEST(ChunkFrame, ParsesProtobufBytesCutIntoSlicesAnywhere) {
  const v1::ExchangeChunk reference = SampleChunk(40, true);
  const std::string bytes = reference.SerializeAsString();
  v1::ExchangeChunk header_only = reference;
  header_only.clear_payload();
  for (size_t a = 0; a <= bytes.size(); ++a) {
    for (size_t b = a; b <= bytes.size(); b += 7) {
      SCOPED_TRACE(testing::Message() << "cuts at " << a << ", " << b);
      const ChunkFrame frame = Parsed(Sliced(bytes, {a, b}));
      ASSERT_TRUE(frame.status().ok()) << frame.status();
      EXPECT_EQ(frame.HeaderChunk().SerializeAsString(),
                header_only.SerializeAsString());
      EXPECT_EQ(absl::StrJoin(frame.payload(), ""), reference.payload());
      EXPECT_EQ(frame.payload_bytes(), reference.payload().size());
      EXPECT_TRUE(frame.last());
    }
  }
}

TEST(ChunkFrame, RoundTripsThroughItsOwnSerialisation) {
  v1::ExchangeChunk chunk = SampleChunk(3 << 20, false);
  const v1::ExchangeChunk reference = chunk;
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(ChunkFrame::Take(std::move(chunk)).Serialize(&buffer).ok());
  const ChunkFrame frame = Parsed(buffer);
  ASSERT_TRUE(frame.status().ok());
  v1::ExchangeChunk parsed = frame.HeaderChunk();
  parsed.set_payload(absl::StrJoin(frame.payload(), ""));
  EXPECT_EQ(parsed.SerializeAsString(), reference.SerializeAsString());
}

TEST(ChunkFrame, SkipsUnknownFieldsAsProtobufDoes) {
  v1::ExchangeChunk chunk = SampleChunk(16, true);
  std::string bytes = chunk.SerializeAsString();
  // field 9 varint 300, field 10 fixed32, field 11 bytes "abc"
  bytes += std::string("\x48\xac\x02\x55\x01\x02\x03\x04\x5a\x03" "abc", 13);
  const ChunkFrame frame = Parsed(Sliced(bytes, {5}));
  ASSERT_TRUE(frame.status().ok()) << frame.status();
  EXPECT_EQ(absl::StrJoin(frame.payload(), ""), chunk.payload());
  EXPECT_EQ(frame.header().crc32c(), 0xdeadbeefu);
}

TEST(ChunkFrame, TruncatedOrMalformedMessagesAreInvalidArgument) {
  const std::string bytes = SampleChunk(64, true).SerializeAsString();
  const auto refused = [](const std::string& b) {
    return Parsed(Sliced(b, {b.size() / 2})).status();
  };
  // Cut inside the last flag, inside the payload, inside the header.
  for (size_t cut : {size_t{1}, size_t{3}, size_t{40}, bytes.size() - 5}) {
    const absl::Status status = refused(bytes.substr(0, bytes.size() - cut));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << cut;
    EXPECT_THAT(status.message(), HasSubstr("malformed ExchangeChunk"));
  }
  EXPECT_THAT(refused(bytes.substr(0, bytes.size() - 10)).message(),
              HasSubstr("announces 64 bytes; the message ends first"));
  // A header that is not a ChunkHeader, a group, field number 0, a
  // payload field sent as a varint.
  EXPECT_THAT(refused(std::string("\x0a\x02\xff\xff", 4)).message(),
              HasSubstr("does not parse as a ChunkHeader"));
  EXPECT_THAT(refused(std::string("\x0b\x0c", 2)).message(),
              HasSubstr("wire type 3"));
  EXPECT_THAT(refused(std::string("\x00\x01", 2)).message(),
              HasSubstr("field number 0"));
  EXPECT_THAT(refused(std::string("\x10\x01", 2)).message(),
              HasSubstr("field 2 has wire type 0"));
  // A tag of more than 32 bits (an unknown field to a 64-bit reader),
  // which protobuf refuses (found by chunk_frame_fuzzer).
  const std::string long_tag("\xf2\xab\xe7\xf8\xdf\xfe\xcf\xf7\x38\x00", 10);
  EXPECT_FALSE(v1::ExchangeChunk().ParseFromString(long_tag));
  EXPECT_THAT(refused(long_tag).message(), HasSubstr("overlong field tag"));
  // A 32-bit tag padded to 6 bytes, which protobuf refuses too.
  const std::string padded_tag("\xa5\xa5\xa5\xa5\x81\x00\x00\x00\x00", 9);
  EXPECT_FALSE(v1::ExchangeChunk().ParseFromString(padded_tag));
  EXPECT_THAT(refused(padded_tag).message(), HasSubstr("overlong field tag"));
  // Five bytes, but more than 32 bits.
  const std::string wide_tag("\xf2\xff\xff\xff\x7f\x00", 6);
  EXPECT_THAT(refused(wide_tag).message(), HasSubstr("beyond 32 bits"));
  // A header length of 10 bytes whose overflow bits would wrap to 0,
  // which protobuf refuses (found by chunk_frame_fuzzer).
  const std::string long_length("\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x40",
                                11);
  EXPECT_FALSE(v1::ExchangeChunk().ParseFromString(long_length));
  EXPECT_THAT(refused(long_length).message(),
              HasSubstr("overlong or truncated length"));
  const std::string huge_length("\x0a\xff\xff\xff\xff\x0f", 6);
  EXPECT_FALSE(v1::ExchangeChunk().ParseFromString(huge_length));
  EXPECT_THAT(refused(huge_length).message(), HasSubstr("beyond 2^31 - 1"));
  const ChunkFrame bad = Parsed(Sliced(bytes.substr(0, 30), {}));
  EXPECT_TRUE(bad.payload().empty());
}

}  // namespace
}  // namespace gasloc
