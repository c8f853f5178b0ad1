// gasloc-bench exchange: loopback throughput of a model-sized transfer
// through the real exchange path (GrpcPeerTransport -> Peer service ->
// Mailbox, two workers' servers in this process on 127.0.0.1), as a ratio
// to raw TCP over loopback measured in the same invocation (the iperf3-style
// ceiling: one socket, 1 MiB writes, no framing).
//
// For each model size, encoding and chunk size: the exchange one way (A
// sends, B receives) and as a gossip swap (both directions at once), each
// rep right after a raw TCP run of the same shape (one socket per
// direction), so both see the same machine load. Reports GB/s of wire
// bytes and of model bytes (fp32-equivalent: bf16 moves half the wire bytes
// per float) and the ratios to TCP, medians of --reps runs; the process's
// CPU seconds per GB of model bytes the exchange moved (both ends, all
// threads: what the path costs, whatever else the machine runs); plus the
// in-memory cost of the codec alone.
//
//   gasloc-bench exchange [--floats=4194304,25000000] [--encodings=fp32,bf16]
//                         [--chunk_kib=256,1024] [--reps=3]
//                         [--http2=bulk,default] [--malloc=tuned|glibc]
//                         [--raw_streams=1,2]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "bench/iperf3_baseline.h"
#include "common/malloc_tuning.h"
#include "worker/train/trainer.h"
#include "gasloc/v1/peer.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "common/crc32c.h"
#include "server/grpc_peer_transport.h"
#include "server/http2_tuning.h"
#include "server/peer_service.h"
#include "server/server_runner.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc::bench {
namespace {

struct Config {
  std::vector<uint64_t> floats = {4194304, 25000000};
  std::vector<v1::WireEncoding> encodings = {v1::WIRE_ENCODING_FP32,
                                             v1::WIRE_ENCODING_BF16};
  std::vector<uint32_t> chunk_kib = {256, 1024};
  int reps = 3;
  // HTTP/2 transport settings to compare: bulk-tuned and/or gRPC defaults.
  std::vector<bool> bulk_tuning = {true, false};
  // TuneMallocForStreaming() as the worker does (false: glibc's defaults).
  bool malloc_tuning = true;
  // Raw gRPC over several concurrent streams (one-way rows), besides one.
  std::vector<uint64_t> raw_streams;
};

bool ParseList(const std::string& value, std::vector<uint64_t>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0) return false;
    out->push_back(v);
  }
  return !out->empty();
}

constexpr char kUsage[] =
    "Usage: gasloc-bench exchange [--floats=N,...] [--encodings=fp32,bf16] "
    "[--chunk_kib=K,...] [--reps=R] [--http2=bulk,default] "
    "[--malloc=tuned|glibc] [--raw_streams=K,...]\n"
    "  --floats     model sizes in floats (default 4194304,25000000)\n"
    "  --encodings  wire encodings: fp32, bf16, int8 (default fp32,bf16)\n"
    "  --chunk_kib  chunk payload sizes in KiB, 4..3072 (default 256,1024)\n"
    "  --reps       runs per measurement, median reported (default 3)\n"
    "  --http2      transport settings: bulk (server/http2_tuning.h) and/or\n"
    "               default (gRPC's own); default both\n"
    "  --malloc     tuned (common/malloc_tuning.h, as gasloc-worker) or\n"
    "               glibc (its defaults); default tuned\n"
    "  --raw_streams also stream the one-way rows' bytes through bare gRPC\n"
    "               split over K concurrent streams (own connections) and\n"
    "               print its GB/s beside one stream's (default: none)\n";

int Usage(const char* program, const std::string& error) {
  std::fprintf(stderr, "%s: %s\n%s", program, error.c_str(), kUsage);
  return 2;
}

// --- raw TCP baseline -------------------------------------------------------

// A connected loopback socket pair: {client, server}.
std::pair<int, int> TcpPair() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listener);
    return {-1, -1};
  }
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(listener);
    close(client);
    return {-1, -1};
  }
  const int server = accept(listener, nullptr, nullptr);
  close(listener);
  return {client, server};
}

// Streams `bytes` from `from` to `to` (1 MiB writes and reads); true if
// all arrived.
bool TcpMove(int from, int to, uint64_t bytes) {
  std::vector<char> out(1 << 20, 'x');
  std::vector<char> in(1 << 20);
  bool ok = true;
  std::thread reader([&] {
    uint64_t got = 0;
    while (got < bytes) {
      const ssize_t n = read(to, in.data(), in.size());
      if (n <= 0) {
        ok = false;
        return;
      }
      got += n;
    }
  });
  uint64_t sent = 0;
  while (sent < bytes) {
    const size_t want = std::min<uint64_t>(out.size(), bytes - sent);
    const ssize_t n = write(from, out.data(), want);
    if (n <= 0) {
      ok = false;
      break;
    }
    sent += n;
  }
  reader.join();
  return ok;
}

// Seconds to move `bytes` one way, or both ways at once over two sockets.
double TcpSeconds(uint64_t bytes, bool both_ways) {
  auto [c1, s1] = TcpPair();
  auto [c2, s2] = TcpPair();
  if (c1 < 0 || c2 < 0) return -1;
  const absl::Time start = absl::Now();
  bool ok = true, ok2 = true;
  std::thread other;
  if (both_ways) other = std::thread([&] { ok2 = TcpMove(c2, s2, bytes); });
  ok = TcpMove(c1, s1, bytes);
  if (other.joinable()) other.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (int fd : {c1, s1, c2, s2}) close(fd);
  return ok && ok2 ? seconds : -1;
}

// --- raw gRPC baseline -----------------------------------------------------

// Peer.Exchange that only reads and discards: gRPC's own cost for the same
// message sizes, without the codec, checksums or the Mailbox.
class SinkService final : public v1::Peer::Service {
 public:
  grpc::Status Exchange(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ExchangeChunk, v1::ExchangeChunk>* stream)
      override {
    v1::ExchangeChunk chunk;
    while (stream->Read(&chunk)) {
      if (chunk.last()) {
        stream->Write(v1::ExchangeChunk());
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut");
  }
};

// Seconds to stream `bytes` as chunks of `chunk_bytes` (one pre-built
// message, sent repeatedly) to the sink at `address`; -1 on failure.
double RawGrpcSeconds(const std::string& address, uint64_t bytes,
                      uint32_t chunk_bytes, bool bulk_tuning) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (bulk_tuning) ApplyBulkTransferArgs(args);  // as the peers'
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Peer::NewStub(channel);
  v1::ExchangeChunk chunk;
  chunk.mutable_payload()->assign(chunk_bytes, 'x');
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  auto stream = stub->Exchange(&context);
  for (uint64_t sent = 0; sent < bytes; sent += chunk_bytes) {
    chunk.set_last(sent + chunk_bytes >= bytes);
    if (!stream->Write(chunk)) break;
  }
  stream->WritesDone();
  v1::ExchangeChunk ack;
  stream->Read(&ack);
  const bool ok = stream->Finish().ok();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return ok ? seconds : -1;
}

// Seconds to stream `bytes` split over `streams` concurrent raw gRPC
// streams, each on its own channel (so its own TCP connection); -1 if one
// failed. Says whether several streams per transfer would help here.
double RawGrpcStreamsSeconds(const std::string& address, uint64_t bytes,
                             uint32_t chunk_bytes, bool bulk_tuning,
                             int streams) {
  std::vector<double> seconds(streams);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int i = 0; i < streams; ++i)
    threads.emplace_back([&, i] {
      seconds[i] = RawGrpcSeconds(address, bytes / streams, chunk_bytes,
                                  bulk_tuning);
    });
  for (std::thread& t : threads) t.join();
  for (double s : seconds)
    if (s < 0) return -1;
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// --- the exchange -----------------------------------------------------------

// The benchmark's loopback servers check no credentials (docs/security.md).
CredentialsOptions Insecure() {
  CredentialsOptions options;
  options.insecure = true;
  return options;
}

PeerServiceOptions InsecurePeerOptions() {
  static const Authenticator* const authenticator = [] {
    AuthOptions options;
    options.insecure = true;
    return new Authenticator(options);
  }();
  PeerServiceOptions options;
  options.authenticator = authenticator;
  return options;
}

struct Node {
  Node(uint64_t id, bool bulk_tuning)
      : mailbox([id] {
          MailboxOptions o;
          o.self_id = id;
          return o;
        }()),
        service(&mailbox, InsecurePeerOptions()),
        runner(ServerOptions{.listen_address = "127.0.0.1:0",
                             .credentials = Insecure(),
                             .max_receive_message_bytes = 8 << 20,
                             .http2_bulk_tuning = bulk_tuning}),
        transport(GrpcPeerTransportOptions{.mailbox = &mailbox,
                                           .credentials = Insecure(),
                                           .max_message_bytes = 8 << 20,
                                           .http2_bulk_tuning = bulk_tuning}) {
    runner.AddService(&service);
    auto port = runner.Start();
    address = absl::StrCat("127.0.0.1:", port.ok() ? *port : 0);
  }
  Mailbox mailbox;
  PeerService service;
  ServerRunner runner;
  GrpcPeerTransport transport;
  std::string address;
};

// This process's CPU time (all threads) in seconds.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Seconds for one exchange step of `key` (A -> B, and B -> A if
// both_ways), or -1 if any transfer failed; `*cpu_seconds`: the CPU time
// both ends spent on it (less sensitive to other load than the wall time).
double ExchangeSeconds(Node& a, Node& b, const TransferKey& key,
                       const std::vector<float>& model_a,
                       const std::vector<float>& model_b,
                       std::vector<float>& scratch_a,
                       std::vector<float>& scratch_b, bool both_ways,
                       const ExchangeOptions& options, double* cpu_seconds) {
  const uint64_t n = model_a.size();
  std::vector<TransferOutcome> out_a, out_b;
  const double cpu_start = ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  std::thread other([&] {
    OutgoingTransfer send{.peer_id = 1, .address = a.address,
                          .data = model_b, .range_begin = 0, .range_end = n};
    IncomingTransfer recv{.peer_id = 1, .buffer = scratch_b,
                          .range_begin = 0, .range_end = n};
    out_b = b.transport.Exchange(
        key, both_ways ? std::span<const OutgoingTransfer>(&send, 1)
                       : std::span<const OutgoingTransfer>(),
        {&recv, 1}, options);
  });
  OutgoingTransfer send{.peer_id = 2, .address = b.address, .data = model_a,
                        .range_begin = 0, .range_end = n};
  IncomingTransfer recv{.peer_id = 2, .buffer = scratch_a, .range_begin = 0,
                        .range_end = n};
  out_a = a.transport.Exchange(
      key, {&send, 1},
      both_ways ? std::span<const IncomingTransfer>(&recv, 1)
                : std::span<const IncomingTransfer>(),
      options);
  other.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  *cpu_seconds = ProcessCpuSeconds() - cpu_start;
  for (const auto* outs : {&out_a, &out_b})
    for (const TransferOutcome& o : *outs)
      if (!o.status.ok()) {
        std::fprintf(stderr, "exchange failed: %s\n",
                     o.status.ToString().c_str());
        return -1;
      }
  return seconds;
}

// "62%", or "" for a ratio that was not measured (0).
std::string Percent(double ratio) {
  return ratio > 0 ? absl::StrCat(static_cast<int>(100 * ratio), "%") : "";
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// In-memory cost of the codec alone (encode + CRC + check + decode of the
// whole model), to tell CPU-bound from network-bound.
void PrintCodecSpeed(const Config& config, const std::vector<float>& model,
                     std::vector<float>& scratch) {
  const double model_bytes = 4.0 * model.size();
  for (v1::WireEncoding encoding : config.encodings) {
    std::vector<double> encode_s, crc_s, decode_s, fused_s, send_s;
    const ChunkContext context{.key = TransferKey{},
                               .sender_id = 0,
                               .range_begin = 0,
                               .range_end = model.size(),
                               .encoding = encoding,
                               .arena_elements = model.size()};
    v1::ExchangeChunk chunk;
    std::string payload;
    for (int r = 0; r < config.reps; ++r) {
      payload.clear();
      absl::Time t0 = absl::Now();
      if (!EncodePayload(model, encoding, &payload).ok()) return;
      absl::Time t1 = absl::Now();
      const uint32_t crc = Crc32c(payload.data(), payload.size());
      absl::Time t2 = absl::Now();
      if (!DecodePayload(payload, encoding, scratch).ok()) return;
      absl::Time t3 = absl::Now();
      // The receive path: CRC and check+decode fused in one pass.
      if (!DecodeCheckedPayload(payload, encoding, scratch, 0, crc).ok())
        return;
      absl::Time t4 = absl::Now();
      // The send path: encode and CRC fused (one chunk of the whole model).
      if (!EncodeChunk(context, model,
                       {.offset = 0, .length = static_cast<uint32_t>(model.size())},
                       true, &chunk)
               .ok())
        return;
      absl::Time t5 = absl::Now();
      send_s.push_back(absl::ToDoubleSeconds(t5 - t4));
      encode_s.push_back(absl::ToDoubleSeconds(t1 - t0));
      crc_s.push_back(absl::ToDoubleSeconds(t2 - t1));
      decode_s.push_back(absl::ToDoubleSeconds(t3 - t2));
      fused_s.push_back(absl::ToDoubleSeconds(t4 - t3));
    }
    const double send = Median(encode_s) + Median(crc_s);
    const double receive = Median(crc_s) + Median(decode_s);
    auto gbps = [&](double seconds) { return model_bytes / seconds / 1e9; };
    std::printf(
        "  codec %s in memory, GB/s of model bytes: encode %.2f, crc32c "
        "%.2f, check+decode %.2f; send (encode + crc) separate %.2f, fused "
        "%.2f (%.2fx); receive (crc + check + decode) separate %.2f, fused "
        "%.2f (%.2fx)\n",
        EncodingName(encoding).c_str(), gbps(Median(encode_s)),
        gbps(Median(crc_s)), gbps(Median(decode_s)), gbps(send),
        gbps(Median(send_s)), send / Median(send_s), gbps(receive),
        gbps(Median(fused_s)), receive / Median(fused_s));
  }
}

int RunExchangeBench(int argc, char** argv) {
  Config config;
  std::string floats, chunk_kib, encodings, http2, malloc_choice, raw_streams;
  int reps = config.reps;
  BenchFlags flags;
  flags.strings = {{"floats", &floats},       {"chunk-kib", &chunk_kib},
                   {"encodings", &encodings}, {"http2", &http2},
                   {"malloc", &malloc_choice},
                   {"raw-streams", &raw_streams}};
  flags.ints = {{"reps", &reps}};
  if (!ParseBenchFlags(argc, argv, argv[0], kUsage, flags)) return 2;
  std::vector<uint64_t> list;
  if (!floats.empty() && !ParseList(floats, &config.floats))
    return Usage(argv[0], "--floats wants positive integers");
  if (!chunk_kib.empty()) {
    if (!ParseList(chunk_kib, &list))
      return Usage(argv[0], "--chunk_kib wants positive integers");
    config.chunk_kib.clear();
    for (uint64_t k : list) {
      if (k < 4 || k > 3072)
        return Usage(argv[0], absl::StrCat("--chunk_kib ", k,
                                           " is outside 4..3072"));
      config.chunk_kib.push_back(static_cast<uint32_t>(k));
    }
  }
  if (!encodings.empty()) {
    config.encodings.clear();
    for (absl::string_view e : absl::StrSplit(encodings, ',')) {
      if (e == "fp32") {
        config.encodings.push_back(v1::WIRE_ENCODING_FP32);
      } else if (e == "bf16") {
        config.encodings.push_back(v1::WIRE_ENCODING_BF16);
      } else if (e == "int8") {
        config.encodings.push_back(v1::WIRE_ENCODING_INT8);
      } else {
        return Usage(argv[0], absl::StrCat("unknown encoding '", e,
                                           "' (fp32, bf16, int8)"));
      }
    }
  }
  if (!http2.empty()) {
    config.bulk_tuning.clear();
    for (absl::string_view t : absl::StrSplit(http2, ',')) {
      if (t != "bulk" && t != "default")
        return Usage(argv[0],
                     absl::StrCat("unknown --http2 '", t, "' (bulk, default)"));
      config.bulk_tuning.push_back(t == "bulk");
    }
  }
  if (!malloc_choice.empty()) {
    if (malloc_choice != "tuned" && malloc_choice != "glibc")
      return Usage(argv[0], absl::StrCat("unknown --malloc '", malloc_choice,
                                         "' (tuned, glibc)"));
    config.malloc_tuning = malloc_choice == "tuned";
  }
  if (!raw_streams.empty() &&
      (!ParseList(raw_streams, &config.raw_streams) ||
       *std::max_element(config.raw_streams.begin(),
                         config.raw_streams.end()) > 16))
    return Usage(argv[0], "--raw_streams wants integers in 1..16");
  if (reps < 1) return Usage(argv[0], "--reps wants one positive integer");
  config.reps = reps;

  if (config.malloc_tuning) {
    const std::string refused = TuneMallocForStreaming(
        ResolveThreads(/*threads=*/0, {}));  // all cores, as a worker
    if (!refused.empty())
      std::fprintf(stderr, "malloc tuning refused: %s\n", refused.c_str());
  }
  std::printf("malloc: %s\n", config.malloc_tuning
                                    ? "tuned (common/malloc_tuning.h)"
                                    : "glibc defaults");

  // One pair of workers and one sink per transport setting.
  struct Setup {
    explicit Setup(bool bulk)
        : bulk_tuning(bulk),
          a(1, bulk),
          b(2, bulk),
          sink_runner(ServerOptions{.listen_address = "127.0.0.1:0",
                                    .credentials = Insecure(),
                                    .max_receive_message_bytes = 8 << 20,
                                    .http2_bulk_tuning = bulk}) {
      sink_runner.AddService(&sink);
      auto port = sink_runner.Start();
      sink_address = absl::StrCat("127.0.0.1:", port.ok() ? *port : 0);
    }
    bool ok() const {
      return !a.address.ends_with(":0") && !b.address.ends_with(":0") &&
             !sink_address.ends_with(":0");
    }
    bool bulk_tuning;
    Node a, b;
    SinkService sink;
    ServerRunner sink_runner;
    std::string sink_address;
  };
  std::vector<std::unique_ptr<Setup>> setups;
  for (bool bulk : config.bulk_tuning) {
    setups.push_back(std::make_unique<Setup>(bulk));
    if (!setups.back()->ok()) {
      std::fprintf(stderr, "cannot start the loopback servers\n");
      return 1;
    }
  }
  const bool have_iperf3 = HaveIperf3();
  if (!have_iperf3)
    std::printf("iperf3 not found: the wire/iperf3 column stays empty "
                "(apt-get install iperf3)\n");
  uint64_t round = 0;
  std::string json = "{\"bench\":\"exchange\",\"results\":[";
  bool first_json = true;
  for (uint64_t floats : config.floats) {
    const uint64_t model_bytes = floats * 4;
    std::vector<float> model_a(floats), model_b(floats);
    for (uint64_t i = 0; i < floats; ++i) {
      model_a[i] = 0.001f * static_cast<float>(i % 1000) - 0.5f;
      model_b[i] = -model_a[i];
    }
    std::vector<float> scratch_a(floats), scratch_b(floats);
    std::printf("model %llu floats (%.1f MB fp32)\n",
                static_cast<unsigned long long>(floats), model_bytes / 1e6);
    PrintCodecSpeed(config, model_a, scratch_a);
    std::printf("  %-5s %6s %-9s %-7s %9s %10s %10s %10s %10s %9s %12s %s\n",
                "enc", "chunk", "direction", "http2", "TCP GB/s", "wire GB/s",
                "model GB/s", "wire/TCP", "model/TCP", "CPU s/GB",
                "wire/iperf3", "wire/raw-gRPC");
    for (v1::WireEncoding encoding : config.encodings) {
      // Wire bytes per fp32 model byte (INT8: its block scales included).
      const double wire_per_model =
          static_cast<double>(*PayloadBytes(encoding, 1 << 20)) / (4 << 20);
      for (uint32_t kib : config.chunk_kib) {
        for (bool both_ways : {false, true}) {
          ExchangeOptions options;
          options.encoding = encoding;
          options.chunk_bytes = kib << 10;
          const double directions = both_ways ? 2 : 1;
          // Each rep measures TCP and then, right after it, the exchange
          // with every transport setting, so all see the same machine
          // load; medians over reps.
          const size_t n_setups = setups.size();
          std::vector<double> tcp_gbs;
          std::vector<std::vector<double>> model_gbs(n_setups),
              ratios(n_setups), grpc_ratios(n_setups),
              iperf_ratios(n_setups), cpu_per_gb(n_setups);
          // Raw gRPC GB/s per (setting, stream count in raw_streams).
          std::vector<std::vector<std::vector<double>>> streams_gbs(
              n_setups,
              std::vector<std::vector<double>>(config.raw_streams.size()));
          for (int r = 0; r < config.reps; ++r) {
            const double tcp_s = TcpSeconds(model_bytes, both_ways);
            if (tcp_s <= 0) {
              std::fprintf(stderr, "raw TCP baseline failed\n");
              return 1;
            }
            tcp_gbs.push_back(directions * model_bytes / tcp_s / 1e9);
            // iperf3 (one stream) for the one-way rows: the wire bytes.
            const double iperf_s =
                both_ways || !have_iperf3
                    ? -1
                    : Iperf3Seconds(
                          static_cast<uint64_t>(model_bytes * wire_per_model));
            for (size_t k = 0; k < n_setups; ++k) {
              Setup& setup = *setups[k];
              options.deadline = absl::Now() + absl::Seconds(300);
              const TransferKey key{.job_id = 1,
                                    .round = ++round,
                                    .phase = v1::EXCHANGE_PHASE_GOSSIP,
                                    .step = 0};
              double cpu = 0;
              const double s = ExchangeSeconds(setup.a, setup.b, key, model_a,
                                               model_b, scratch_a, scratch_b,
                                               both_ways, options, &cpu);
              if (s < 0) return 1;
              cpu_per_gb[k].push_back(cpu / (directions * model_bytes / 1e9));
              if (!both_ways) {
                // The wire bytes of this encoding through bare gRPC.
                const double g = RawGrpcSeconds(
                    setup.sink_address,
                    static_cast<uint64_t>(model_bytes * wire_per_model),
                    options.chunk_bytes, setup.bulk_tuning);
                if (g > 0) grpc_ratios[k].push_back(g / s);
                if (iperf_s > 0) iperf_ratios[k].push_back(iperf_s / s);
                for (size_t j = 0; j < config.raw_streams.size(); ++j) {
                  const double wire = model_bytes * wire_per_model;
                  const double t = RawGrpcStreamsSeconds(
                      setup.sink_address, static_cast<uint64_t>(wire),
                      options.chunk_bytes, setup.bulk_tuning,
                      static_cast<int>(config.raw_streams[j]));
                  if (t > 0) streams_gbs[k][j].push_back(wire / t / 1e9);
                }
              }
              model_gbs[k].push_back(directions * model_bytes / s / 1e9);
              ratios[k].push_back(tcp_s / s);
            }
          }
          const double tcp = Median(tcp_gbs);
          for (size_t k = 0; k < n_setups; ++k) {
            const char* http2 = setups[k]->bulk_tuning ? "bulk" : "default";
            const double model = Median(model_gbs[k]);
            const double wire = model * wire_per_model;
            const double model_ratio = Median(ratios[k]);
            const double wire_ratio = model_ratio * wire_per_model;
            const double grpc_ratio =
                grpc_ratios[k].empty() ? 0 : Median(grpc_ratios[k]);
            const double iperf_ratio =
                iperf_ratios[k].empty() ? 0 : Median(iperf_ratios[k]);
            const std::string enc = EncodingName(encoding);
            const double cpu = Median(cpu_per_gb[k]);
            std::printf(
                "  %-5s %4uKiB %-9s %-7s %9.2f %10.2f %10.2f %9.0f%% %9.0f%% "
                "%9.2f %12s %s\n",
                enc.c_str(), kib, both_ways ? "both" : "one", http2, tcp, wire,
                model, 100 * wire_ratio, 100 * model_ratio, cpu,
                Percent(iperf_ratio).c_str(), Percent(grpc_ratio).c_str());
            for (size_t j = 0; j < config.raw_streams.size(); ++j)
              if (!streams_gbs[k][j].empty())
                std::printf("        raw gRPC over %llu stream(s): %.2f GB/s\n",
                            static_cast<unsigned long long>(
                                config.raw_streams[j]),
                            Median(streams_gbs[k][j]));
            absl::StrAppend(
                &json, first_json ? "" : ",", "{\"floats\":", floats,
                ",\"encoding\":\"", enc, "\",\"chunk_kib\":", kib,
                ",\"both_ways\":", both_ways ? "true" : "false",
                ",\"http2\":\"", http2, "\",\"tcp_gbps\":", tcp,
                ",\"wire_gbps\":", wire, ",\"model_gbps\":", model,
                ",\"wire_ratio\":", wire_ratio, ",\"model_ratio\":",
                model_ratio, ",\"wire_vs_iperf3\":", iperf_ratio,
                ",\"wire_vs_raw_grpc\":", grpc_ratio,
                ",\"cpu_s_per_model_gb\":", cpu, "}");
            first_json = false;
          }
        }
      }
    }
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

GASLOC_BENCH_COMMAND(exchange,
                     "peer exchange loopback throughput vs raw TCP",
                     RunExchangeBench);

}  // namespace gasloc::bench
