#include "server/chunk_frame.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/impl/rpc_method.h"

namespace gasloc {
namespace {

// v1::ExchangeChunk's fields and their protobuf wire types.
constexpr uint32_t kHeaderField = 1;   // length-delimited (ChunkHeader)
constexpr uint32_t kPayloadField = 2;  // length-delimited (bytes)
constexpr uint32_t kLastField = 3;     // varint (bool)
constexpr uint32_t kVarint = 0, kFixed64 = 1, kDelimited = 2, kFixed32 = 5;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendTag(uint32_t field, uint32_t wire_type, std::string* out) {
  AppendVarint((field << 3) | wire_type, out);
}

// Reads protobuf wire format across a message's slices, which may split
// anything (a varint, a header, the payload) anywhere.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    SkipExhausted();
  }
  bool done() const { return index_ == slices_.size(); }
  // A varint of at most `max_bytes` bytes (protobuf: 10 for a value, 5
  // for a field tag).
  bool ReadVarint(uint64_t* value, int max_bytes = 10) {
    *value = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
      if (done()) return false;
      const uint8_t byte = slices_[index_].begin()[pos_];
      Advance(1);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;  // longer than max_bytes
  }
  // The next `n` bytes as views, one per slice they lie in (or skipped
  // when `out` is null); false if the message ends first.
  bool Take(uint64_t n, std::vector<absl::string_view>* out) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& slice = slices_[index_];
      const size_t k = std::min<uint64_t>(n, slice.size() - pos_);
      if (out != nullptr)
        out->emplace_back(reinterpret_cast<const char*>(slice.begin()) + pos_,
                          k);
      Advance(k);
      n -= k;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    pos_ += n;
    SkipExhausted();
  }
  void SkipExhausted() {
    while (index_ < slices_.size() && pos_ == slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ExchangeChunk message: ", why));
}

void DeleteString(void* string) { delete static_cast<std::string*>(string); }

}  // namespace

ChunkFrame ChunkFrame::Take(v1::ExchangeChunk&& chunk) {
  ChunkFrame frame;
  frame.has_header_ = chunk.has_header();
  frame.header_ = chunk.header();
  frame.last_ = chunk.last();
  auto* payload = new std::string(std::move(*chunk.mutable_payload()));
  chunk.mutable_payload()->clear();
  if (payload->empty()) {
    delete payload;
    return frame;
  }
  frame.payload_bytes_ = payload->size();
  frame.pieces_.emplace_back(*payload);
  frame.slices_.emplace_back(payload->data(), payload->size(), &DeleteString,
                             payload);
  return frame;
}

v1::ExchangeChunk ChunkFrame::HeaderChunk() const {
  v1::ExchangeChunk chunk;
  if (has_header_) *chunk.mutable_header() = header_;
  chunk.set_last(last_);
  return chunk;
}

grpc::Status ChunkFrame::Serialize(grpc::ByteBuffer* buffer) const {
  // Protobuf's own encoding of {header, payload, last}: fields in number
  // order, each omitted when it holds its default.
  std::string prefix;
  if (has_header_) {
    AppendTag(kHeaderField, kDelimited, &prefix);
    AppendVarint(header_.ByteSizeLong(), &prefix);
    if (!header_.AppendToString(&prefix))
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "cannot serialise a chunk header");
  }
  if (payload_bytes_ > 0) {
    AppendTag(kPayloadField, kDelimited, &prefix);
    AppendVarint(payload_bytes_, &prefix);
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(slices_.size() + 2);
  slices.emplace_back(prefix);
  // The payload's own slices, referenced, not copied.
  slices.insert(slices.end(), slices_.begin(), slices_.end());
  if (last_) {
    std::string suffix;
    AppendTag(kLastField, kVarint, &suffix);
    suffix.push_back(1);
    slices.emplace_back(suffix);
  }
  *buffer = grpc::ByteBuffer(slices.data(), slices.size());
  return grpc::Status::OK;
}

void ChunkFrame::Parse(const grpc::ByteBuffer& buffer) {
  *this = ChunkFrame();
  if (!buffer.Dump(&slices_).ok()) {
    status_ = Malformed("cannot read the message's bytes");
    return;
  }
  SliceReader reader(slices_);
  std::vector<absl::string_view> bytes;
  while (!reader.done()) {
    uint64_t tag = 0;
    if (!reader.ReadVarint(&tag, /*max_bytes=*/5)) {
      status_ = Malformed("truncated or overlong field tag");
      break;
    }
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = tag & 7;
    uint64_t value = 0;
    if (tag > std::numeric_limits<uint32_t>::max()) {
      // Protobuf reads a tag as at most 5 bytes of 32 bits and refuses
      // longer ones (chunk_frame_fuzzer found both differences).
      status_ = Malformed("field tag beyond 32 bits");
    } else if (field == 0) {
      status_ = Malformed("field number 0");
    } else if (wire_type == kVarint) {
      if (!reader.ReadVarint(&value))
        status_ = Malformed("truncated varint");
      else if (field == kLastField)
        last_ = value != 0;
    } else if (wire_type == kFixed64 || wire_type == kFixed32) {
      if (!reader.Take(wire_type == kFixed64 ? 8 : 4, nullptr))
        status_ = Malformed("truncated fixed-width field");
    } else if (wire_type == kDelimited) {
      bytes.clear();
      // A length is at most 5 bytes and 31 bits, as protobuf reads it: a
      // longer varint's overflow bits would otherwise wrap to a small
      // length (found by chunk_frame_fuzzer).
      if (!reader.ReadVarint(&value, /*max_bytes=*/5)) {
        status_ = Malformed(absl::StrCat("field ", field, " has an overlong "
                                         "or truncated length"));
      } else if (value > static_cast<uint64_t>(INT32_MAX)) {
        status_ = Malformed(absl::StrCat("field ", field, " announces ",
                                         value, " bytes, beyond 2^31 - 1"));
      } else if (!reader.Take(value, &bytes)) {
        status_ = Malformed(absl::StrCat("field ", field, " announces ",
                                         value, " bytes; the message ends "
                                         "first"));
      } else if (field == kHeaderField) {
        has_header_ = true;
        if (!header_.MergeFromString(absl::StrJoin(bytes, "")))
          status_ = Malformed("the header does not parse as a ChunkHeader");
      } else if (field == kPayloadField) {
        pieces_ = bytes;  // as protobuf: the last occurrence wins
        payload_bytes_ = value;
      }
    } else {
      status_ = Malformed(absl::StrCat("wire type ", wire_type));
    }
    if (status_.ok() && ((field == kLastField && wire_type != kVarint) ||
                         ((field == kHeaderField || field == kPayloadField) &&
                          wire_type != kDelimited)))
      status_ = Malformed(absl::StrCat("field ", field, " has wire type ",
                                       wire_type));
    if (!status_.ok()) break;
  }
  if (!status_.ok()) {
    pieces_.clear();
    payload_bytes_ = 0;
  }
}

std::unique_ptr<ExchangeClientStream> OpenExchangeStream(
    const std::shared_ptr<grpc::Channel>& channel,
    grpc::ClientContext* context) {
  const grpc::internal::RpcMethod method(
      kExchangeMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  return std::unique_ptr<ExchangeClientStream>(
      grpc::internal::ClientReaderWriterFactory<ChunkFrame, ChunkFrame>::Create(
          channel.get(), method, context));
}

}  // namespace gasloc
