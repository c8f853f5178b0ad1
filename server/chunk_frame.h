// ChunkFrame: one Peer.Exchange message whose payload stays in gRPC
// slices, so that neither end copies it through protobuf (issue 34).
//
// On the wire a frame is a v1::ExchangeChunk, byte for byte what
// protobuf writes for {header, payload, last} (fields in number order,
// defaults omitted), so a peer that sends or reads v1::ExchangeChunk
// interoperates with one that uses frames. The serialisation traits below
// (grpc::SerializationTraits<ChunkFrame>) do the work:
//   send     the header and the payload's field tag go through protobuf
//            into one small slice; the payload itself is handed to gRPC
//            as the slice that owns the encoder's buffer (no copy);
//   receive  the message's slices are walked as protobuf wire format; the
//            header is parsed, and the payload is kept as views into the
//            received slices (PayloadPieces), which the Mailbox decodes
//            straight into the receive buffer. A message that is not a
//            well-formed ExchangeChunk (truncated, bad varint, a group, a
//            known field of the wrong wire type) gives a frame whose
//            status() is INVALID_ARGUMENT saying what is wrong, never a
//            gRPC-level failure, so the receiver can refuse it by name.
// Unknown fields are skipped, as protobuf does.
//
// Thread safety: a move-only value type. Const methods may run
// concurrently; the slices it holds are reference-counted by gRPC and safe
// to share.
#ifndef GASLOC_SERVER_CHUNK_FRAME_H_
#define GASLOC_SERVER_CHUNK_FRAME_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gasloc/v1/peer.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/sync_stream.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

class ChunkFrame {
 public:
  ChunkFrame() = default;
  // Move-only: a received payload's views may point into the slice
  // objects themselves (gRPC inlines slices of a few bytes), which a
  // move keeps in place and a copy would not.
  ChunkFrame(ChunkFrame&&) = default;
  ChunkFrame& operator=(ChunkFrame&&) = default;
  ChunkFrame(const ChunkFrame&) = delete;
  ChunkFrame& operator=(const ChunkFrame&) = delete;

  // A frame of `chunk`'s header and last flag whose payload is the
  // chunk's payload string, moved (not copied) into a slice that frees
  // it when gRPC is done with it. `chunk`'s payload is left empty.
  static ChunkFrame Take(v1::ExchangeChunk&& chunk);

  const v1::ChunkHeader& header() const { return header_; }
  bool has_header() const { return has_header_; }
  bool last() const { return last_; }
  // The payload as views into the slices this frame holds (valid while
  // the frame lives); empty for an empty payload.
  PayloadPieces payload() const { return pieces_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The payload's slices (tests check that sending copied nothing).
  const std::vector<grpc::Slice>& payload_slices() const { return slices_; }
  // OK, or INVALID_ARGUMENT for a received message that is not a
  // well-formed ExchangeChunk.
  const absl::Status& status() const { return status_; }

  // The header and last flag as a v1::ExchangeChunk with no payload.
  v1::ExchangeChunk HeaderChunk() const;

  // Serialisation (used by the traits; public for tests).
  grpc::Status Serialize(grpc::ByteBuffer* buffer) const;
  // Reads `buffer` (which may hold the message in any number of slices);
  // a malformed message sets status(), and the call still succeeds.
  void Parse(const grpc::ByteBuffer& buffer);

 private:
  v1::ChunkHeader header_;
  bool has_header_ = false;
  bool last_ = false;
  std::vector<grpc::Slice> slices_;        // own the payload's bytes
  std::vector<absl::string_view> pieces_;  // the payload, in slices_
  uint64_t payload_bytes_ = 0;
  absl::Status status_;
};

// Peer.Exchange carried as frames: the method's name, its index among
// v1::Peer::Service's methods (the order of peer.proto), and the dialer's
// side of the stream (the generated stub's, with frames for messages).
inline constexpr char kExchangeMethod[] = "/gasloc.v1.Peer/Exchange";
inline constexpr int kExchangeMethodIndex = 0;
using ExchangeClientStream = grpc::ClientReaderWriter<ChunkFrame, ChunkFrame>;
using ExchangeServerStream = grpc::ServerReaderWriter<ChunkFrame, ChunkFrame>;
std::unique_ptr<ExchangeClientStream> OpenExchangeStream(
    const std::shared_ptr<grpc::Channel>& channel,
    grpc::ClientContext* context);

}  // namespace gasloc

namespace grpc {

template <>
class SerializationTraits<gasloc::ChunkFrame, void> {
 public:
  static Status Serialize(const gasloc::ChunkFrame& frame, ByteBuffer* buffer,
                          bool* own_buffer) {
    *own_buffer = true;
    return frame.Serialize(buffer);
  }
  static Status Deserialize(ByteBuffer* buffer, gasloc::ChunkFrame* frame) {
    frame->Parse(*buffer);
    buffer->Clear();
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // GASLOC_SERVER_CHUNK_FRAME_H_
