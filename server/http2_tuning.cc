#include "server/http2_tuning.h"

#include <grpc/grpc.h>

namespace gasloc {
namespace {

// Largest HTTP/2 frame a receiver will accept (the protocol's ceiling is
// 2^24 - 1): a 1 MiB chunk then travels in one DATA frame, not 64.
constexpr int kMaxFrameBytes = (1 << 24) - 1;
// Initial per-stream receive window: the sender can keep 8 MiB in flight
// before the first WINDOW_UPDATE, instead of 64 KiB.
constexpr int kLookaheadBytes = 8 << 20;
// Socket read sizes: start at 256 KiB and grow to 4 MiB.
constexpr int kMinReadChunkBytes = 256 << 10;
constexpr int kMaxReadChunkBytes = 4 << 20;

template <typename SetInt>
void ApplyAll(SetInt set_int) {
  set_int(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxFrameBytes);
  set_int(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kLookaheadBytes);
  set_int(GRPC_ARG_TCP_READ_CHUNK_SIZE, kMinReadChunkBytes);
  set_int(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, kMinReadChunkBytes);
  set_int(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kMaxReadChunkBytes);
}

}  // namespace

void ApplyBulkTransferArgs(grpc::ChannelArguments& args) {
  ApplyAll([&](const char* name, int value) { args.SetInt(name, value); });
}

void ApplyBulkTransferArgs(grpc::ServerBuilder& builder) {
  ApplyAll([&](const char* name, int value) {
    builder.AddChannelArgument(name, value);
  });
}

}  // namespace gasloc
