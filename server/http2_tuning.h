// HTTP/2 transport settings for bulk model transfers (docs/exchange.md,
// "Transport tuning"). gRPC's defaults suit small RPCs: 16 KiB frames, a
// 64 KiB initial stream window grown by BDP probing, and 8 KiB socket reads
// growing slowly. A peer exchange streams tens to hundreds of MiB in ~1 MiB
// messages, so every peer channel and every server uses these instead.
//
// Thread safety: pure functions on caller-owned builders.
#ifndef GASLOC_SERVER_HTTP2_TUNING_H_
#define GASLOC_SERVER_HTTP2_TUNING_H_

#include <grpcpp/grpcpp.h>

namespace gasloc {

// Applies the bulk-transfer settings to a client channel's arguments.
void ApplyBulkTransferArgs(grpc::ChannelArguments& args);
// Applies the same settings to a server (they govern what it receives).
void ApplyBulkTransferArgs(grpc::ServerBuilder& builder);

}  // namespace gasloc

#endif  // GASLOC_SERVER_HTTP2_TUNING_H_
