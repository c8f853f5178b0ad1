#include "bench/iperf3_baseline.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace gasloc::bench {
namespace {

// A loopback port that was free a moment ago (0 on failure).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string RunAndCapture(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

}  // namespace

bool HaveIperf3() {
  return std::system("command -v iperf3 > /dev/null 2>&1") == 0;
}

double Iperf3Seconds(uint64_t bytes) {
  const int port = FreePort();
  if (port == 0) return -1;
  // A one-off server (-1: exits after one test), then the client; iperf3
  // retries the connection for a moment if the server is not up yet.
  const std::string server =
      absl::StrCat("iperf3 -s -1 -B 127.0.0.1 -p ", port, " > /dev/null 2>&1 &");
  if (std::system(server.c_str()) != 0) return -1;
  absl::SleepFor(absl::Milliseconds(300));
  const std::string json = RunAndCapture(absl::StrCat(
      "iperf3 -c 127.0.0.1 -p ", port, " -n ", bytes, " -J 2> /dev/null"));
  google::protobuf::Struct report;
  if (!google::protobuf::util::JsonStringToMessage(json, &report).ok())
    return -1;
  const auto& fields = report.fields();
  auto end = fields.find("end");
  if (end == fields.end()) return -1;
  const auto& end_fields = end->second.struct_value().fields();
  auto received = end_fields.find("sum_received");
  if (received == end_fields.end()) return -1;
  const auto& sum = received->second.struct_value().fields();
  auto seconds = sum.find("seconds");
  auto bits = sum.find("bits_per_second");
  if (seconds == sum.end() || bits == sum.end() ||
      bits->second.number_value() <= 0)
    return -1;
  // Bytes over the receiver's rate (its "seconds" includes connection
  // set-up granularity; the rate is what iperf3 reports as throughput).
  return 8.0 * static_cast<double>(bytes) / bits->second.number_value();
}

}  // namespace gasloc::bench
