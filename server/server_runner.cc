#include "server/server_runner.h"

#include <pthread.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/http2_tuning.h"

namespace gasloc {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);  // RequestShutdown
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

ServerRunner::ServerRunner(ServerOptions options)
    : options_(std::move(options)) {}

ServerRunner::~ServerRunner() { Shutdown(absl::ZeroDuration()); }

void ServerRunner::AddService(grpc::Service* service) {
  services_.push_back(service);
}

absl::StatusOr<int> ServerRunner::Start() {
  ASSIGN_OR_RETURN(auto credentials,
                   MakeServerCredentials(options_.credentials));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen_address, credentials, &port_);
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  if (options_.http2_bulk_tuning) ApplyBulkTransferArgs(builder);
  if (options_.max_idle_threads > 0)
    builder.SetSyncServerOption(
        grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
        options_.max_idle_threads);
  for (grpc::Service* service : services_) builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen_address,
                     " (address in use or invalid?)"));
  server_->GetHealthCheckService()->SetServingStatus(true);
  return port_;
}

int ServerRunner::WaitForTerminationSignal() {
  sigset_t set = TerminationSignals();
  int signal_number = 0;
  sigwait(&set, &signal_number);
  return signal_number == SIGUSR1 ? 0 : signal_number;
}

void ServerRunner::RequestShutdown() { kill(getpid(), SIGUSR1); }

void ServerRunner::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  // gRPC deadlines are real time.
  server_->Shutdown(absl::ToChronoTime(RealClock::Get().Now() + grace));
  server_->Wait();
  server_.reset();
}

}  // namespace gasloc
