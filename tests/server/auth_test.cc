// Authentication and roles on every RPC of both services (server/auth.h),
// mutual TLS that is mutual, and sender binding, on loopback servers in
// the test process:
//   - every method of the Coordinator and Peer service descriptors, called
//     through a generic stub: no credential -> UNAUTHENTICATED, each wrong
//     role's token -> PERMISSION_DENIED, the right one -> past the check
//     (a new RPC missing from the role table, or without a check, fails);
//   - with --tls_ca a client without a certificate fails the handshake, and
//     a worker certificate acts only for the worker ids it registered;
//   - a peer writing another worker's sender_id is refused before the
//     Mailbox sees the chunk and the honest transfer still commits;
//   - credentials are required unless insecure is said.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "gasloc/v1/peer.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/auth.h"
#include "server/coordinator_service.h"
#include "server/credentials.h"
#include "server/peer_roster.h"
#include "server/peer_service.h"
#include "server/server_runner.h"
#include "tests/support/test_auth.h"
#include "worker/exchange/mailbox.h"
#include "worker/exchange/model_fetch.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The roles that may call each RPC. A method of either service missing here
// fails RoleTable.CoversEveryMethod.
const std::map<std::string, std::set<Role>>& RoleTable() {
  static const auto* const table = new std::map<std::string, std::set<Role>>{
      {"/gasloc.v1.Coordinator/RegisterWorker", {Role::kWorker}},
      {"/gasloc.v1.Coordinator/Heartbeat", {Role::kWorker}},
      {"/gasloc.v1.Coordinator/LeaveWorker", {Role::kWorker}},
      {"/gasloc.v1.Coordinator/GetAssignment", {Role::kWorker}},
      {"/gasloc.v1.Coordinator/ReportRound", {Role::kWorker}},
      {"/gasloc.v1.Coordinator/ListWorkers", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/StartJob", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/GetJob", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/ListJobs", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/StopJob", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/ResumeJob", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/WatchJob", {Role::kOperator}},
      {"/gasloc.v1.Coordinator/ExportModel", {Role::kOperator}},
      {"/gasloc.v1.Peer/Exchange", {Role::kPeer}},
      {"/gasloc.v1.Peer/FetchModel", {Role::kPeer, Role::kCoordinator}},
      {"/gasloc.v1.Peer/Ping", {Role::kPeer}},
  };
  return *table;
}

std::vector<std::string> DescriptorMethods() {
  std::vector<std::string> methods;
  for (const auto* service :
       {v1::Coordinator::service_full_name(), v1::Peer::service_full_name()}) {
    const auto* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            service);
    EXPECT_NE(descriptor, nullptr) << service;
    if (descriptor == nullptr) continue;
    for (int i = 0; i < descriptor->method_count(); ++i)
      methods.push_back(
          absl::StrCat("/", service, "/", descriptor->method(i)->name()));
  }
  return methods;
}

// Options builders (GCC wants every field of a designated initializer).
CredentialsOptions TokensChecked() {
  CredentialsOptions options;
  options.tokens_checked = true;
  return options;
}

ServerOptions Loopback(CredentialsOptions credentials) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.credentials = std::move(credentials);
  return options;
}

PeerServiceOptions PeerOptions(const Authenticator* authenticator,
                               PeerRoster* roster) {
  PeerServiceOptions options;
  options.authenticator = authenticator;
  options.roster = roster;
  options.identity_wait = absl::Seconds(1);
  return options;
}

CoordinatorServiceOptions ServiceOptions(const Authenticator* authenticator) {
  CoordinatorServiceOptions options;
  options.authenticator = authenticator;
  return options;
}

// Tokens of the table test: one unbound token per role.
const std::map<Role, std::string>& RoleTokens() {
  static const auto* const tokens = new std::map<Role, std::string>{
      {Role::kOperator, "operator-token-0123456789"},
      {Role::kWorker, "worker-token-0123456789"},
      {Role::kPeer, "peer-token-0123456789"},
      {Role::kCoordinator, "coordinator-token-0123456789"},
  };
  return *tokens;
}

// Calls `method` with an empty request (one message, then half-close),
// reads whatever comes back and returns the status. `token` empty = no
// authorization header.
grpc::Status CallGeneric(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& method, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (step(1)) {
    grpc::ByteBuffer empty;
    grpc::Slice nothing("");
    grpc::ByteBuffer request(&nothing, 1);
    call->Write(request, reinterpret_cast<void*>(2));
    if (step(2)) {
      call->WritesDone(reinterpret_cast<void*>(3));
      step(3);
    }
    grpc::ByteBuffer response;
    for (int i = 0; i < 100; ++i) {
      call->Read(&response, reinterpret_cast<void*>(4));
      if (!step(4)) break;
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// Both services behind one plaintext server that checks the role tokens.
class RoleTest : public ::testing::Test {
 protected:
  RoleTest()
      : authenticator_([] {
          AuthOptions options;
          for (const auto& [role, token] : RoleTokens())
            options.tokens.push_back(
                TokenGrant{.token = token, .role = role, .worker_name = ""});
          return options;
        }()),
        mailbox_([] {
          MailboxOptions options;
          options.self_id = 2;
          options.early_chunk_wait = absl::Milliseconds(200);
          return options;
        }()),
        peer_service_(&mailbox_, PeerOptions(&authenticator_, nullptr)),
        runner_(Loopback(TokensChecked())) {
    coordinator::CoordinatorOptions options;
    auto created = coordinator::Coordinator::Create(options, nullptr,
                                                    &RealClock::Get());
    EXPECT_TRUE(created.ok()) << created.status();
    coordinator_ = std::move(*created);
    coordinator_service_ = std::make_unique<CoordinatorService>(
        coordinator_.get(), ServiceOptions(&authenticator_));
    runner_.AddService(coordinator_service_.get());
    runner_.AddService(&peer_service_);
    auto port = runner_.Start();
    EXPECT_TRUE(port.ok()) << port.status();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", *port),
                                   grpc::InsecureChannelCredentials());
  }
  ~RoleTest() override {
    coordinator_service_->BeginShutdown();
    mailbox_.Shutdown();
    runner_.Shutdown(absl::ZeroDuration());
  }

  Authenticator authenticator_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> coordinator_service_;
  Mailbox mailbox_;
  PeerService peer_service_;
  ServerRunner runner_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST(RoleTable, CoversEveryMethod) {
  std::set<std::string> in_table;
  for (const auto& [method, role] : RoleTable()) in_table.insert(method);
  const std::vector<std::string> methods = DescriptorMethods();
  EXPECT_EQ(std::set<std::string>(methods.begin(), methods.end()), in_table)
      << "every RPC needs a role: add new methods to RoleTable() and a check "
         "at the top of their handler";
}

TEST_F(RoleTest, EveryRpcChecksCredentialsAndRole) {
  for (const std::string& method : DescriptorMethods()) {
    SCOPED_TRACE(method);
    auto entry = RoleTable().find(method);
    ASSERT_NE(entry, RoleTable().end());
    const std::set<Role>& allowed = entry->second;

    grpc::Status none = CallGeneric(channel_, method, "");
    EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << none.error_message();
    grpc::Status unknown = CallGeneric(channel_, method, "not-a-token-0123456789");
    EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << unknown.error_message();

    for (const auto& [role, token] : RoleTokens()) {
      grpc::Status status = CallGeneric(channel_, method, token);
      if (allowed.count(role) > 0) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << RoleName(role) << ": " << status.error_message();
        EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << RoleName(role) << ": " << status.error_message();
      } else {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << RoleName(role) << ": " << status.error_message();
        EXPECT_THAT(status.error_message(),
                    HasSubstr(absl::StrCat("needs the ",
                                           RoleName(*allowed.begin()))));
      }
    }
  }
}

TEST(AuthTest, TokenFileFormatErrorsNameFileAndLine) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/auth_test-", getpid(), "-tokens");
  fs::create_directories(dir);
  auto short_token =
      LoadTokenFile(testing::WriteTokenFile(dir, "short", "# c\nabc\n"),
                    Role::kWorker);
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_token.status().message(), HasSubstr("line 2"));
  auto fields = LoadTokenFile(
      testing::WriteTokenFile(dir, "fields", "0123456789abcdef w1 extra\n"),
      Role::kPeer);
  EXPECT_THAT(fields.status().message(), HasSubstr("3 fields"));
  auto empty =
      LoadTokenFile(testing::WriteTokenFile(dir, "empty", "\n"), Role::kPeer);
  EXPECT_THAT(empty.status().message(), HasSubstr("holds no token"));
  auto good = LoadTokenFile(
      testing::WriteTokenFile(dir, "good", "0123456789abcdef w1\n"
                                           "fedcba9876543210\n"),
      Role::kPeer);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->size(), 2u);
  EXPECT_EQ((*good)[0].worker_name, "w1");
  EXPECT_EQ((*good)[1].worker_name, "");
  fs::remove_all(dir);
}

TEST(AuthTest, CertificateNamesMapToRoles) {
  EXPECT_TRUE(CallerFromCertificateName("operator").Has(Role::kOperator));
  EXPECT_FALSE(CallerFromCertificateName("operator").Has(Role::kWorker));
  const Caller worker = CallerFromCertificateName("worker:w7");
  EXPECT_TRUE(worker.Has(Role::kWorker));
  EXPECT_TRUE(worker.Has(Role::kPeer));
  EXPECT_FALSE(worker.Has(Role::kOperator));
  EXPECT_EQ(worker.worker_name, "w7");
  // The coordinator's certificate fetches models for exports, nothing else.
  EXPECT_EQ(CallerFromCertificateName("coordinator").roles,
            static_cast<uint32_t>(Role::kCoordinator));
  EXPECT_EQ(CallerFromCertificateName("coordinator:x").roles, 0u);
  EXPECT_EQ(CallerFromCertificateName("worker:").roles, 0u);
  EXPECT_EQ(CallerFromCertificateName("localhost").roles, 0u);
}

TEST(AuthTest, CredentialsAreRequiredUnlessInsecureIsSaid) {
  const CredentialsOptions none;
  auto server = MakeServerCredentials(none);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("--insecure"));
  auto client = MakeChannelCredentials(none);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("--insecure"));
  EXPECT_TRUE(MakeServerCredentials(testing::InsecureCredentials()).ok());
  EXPECT_TRUE(MakeChannelCredentials(testing::InsecureCredentials()).ok());
  EXPECT_TRUE(MakeServerCredentials(TokensChecked()).ok());
  // TLS without a CA would authenticate nobody.
  CredentialsOptions tls_only;
  tls_only.tls_cert_file = "c.pem";
  tls_only.tls_key_file = "k.pem";
  EXPECT_THAT(CheckServerAuth(tls_only, AuthOptions()).message(),
              HasSubstr("--tls_ca"));
  AuthOptions insecure;
  insecure.insecure = true;
  EXPECT_TRUE(CheckServerAuth(none, insecure).ok());
  EXPECT_FALSE(CheckServerAuth(none, AuthOptions()).ok());
}

// A coordinator behind mutual TLS with the certificates of
// scripts/make_test_certs.sh.
class MutualTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this fixture in
    // parallel processes.
    dir_ = absl::StrCat(
        ::testing::TempDir(), "/auth_test-", getpid(), "-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ASSERT_TRUE(testing::MakeTestCerts(dir_, 2).ok());
    authenticator_ = std::make_unique<Authenticator>(AuthOptions{
        .insecure = false, .tokens = {}, .client_certificates = true});
    auto created = coordinator::Coordinator::Create(
        coordinator::CoordinatorOptions(), nullptr, &RealClock::Get());
    ASSERT_TRUE(created.ok()) << created.status();
    coordinator_ = std::move(*created);
    service_ = std::make_unique<CoordinatorService>(
        coordinator_.get(), ServiceOptions(authenticator_.get()));
    CredentialsOptions tls;
    tls.tls_cert_file = Pem("coordinator.pem");
    tls.tls_key_file = Pem("coordinator.key");
    tls.tls_ca_file = Pem("ca.pem");
    runner_ = std::make_unique<ServerRunner>(Loopback(tls));
    runner_->AddService(service_.get());
    auto port = runner_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    address_ = absl::StrCat("localhost:", *port);
  }
  void TearDown() override {
    if (runner_ != nullptr) runner_->Shutdown(absl::ZeroDuration());
    fs::remove_all(dir_);
  }

  std::string Pem(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }
  // A stub presenting `who`.pem (empty = no client certificate).
  std::unique_ptr<v1::Coordinator::Stub> Stub(const std::string& who) {
    CredentialsOptions options;
    options.tls_ca_file = Pem("ca.pem");
    if (!who.empty()) {
      options.tls_cert_file = Pem(who + ".pem");
      options.tls_key_file = Pem(who + ".key");
    }
    auto channel = MakeChannel(address_, options);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return v1::Coordinator::NewStub(*channel);
  }
  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return context;
  }

  std::string dir_, address_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<ServerRunner> runner_;
};

TEST_F(MutualTlsTest, ClientWithoutCertificateFailsTheHandshake) {
  v1::ListJobsResponse jobs;
  grpc::Status without = Stub("")->ListJobs(Context().get(), {}, &jobs);
  // The handshake fails: the call never reaches a handler (which would say
  // UNAUTHENTICATED).
  EXPECT_EQ(without.error_code(), grpc::StatusCode::UNAVAILABLE)
      << without.error_message();
  grpc::Status with = Stub("operator")->ListJobs(Context().get(), {}, &jobs);
  EXPECT_TRUE(with.ok()) << with.error_message();
  grpc::Status worker = Stub("worker1")->ListJobs(Context().get(), {}, &jobs);
  EXPECT_EQ(worker.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << worker.error_message();
}

TEST_F(MutualTlsTest, WorkerCertificateActsOnlyForItsOwnWorkerIds) {
  v1::RegisterWorkerRequest request;
  request.mutable_info()->set_address("127.0.0.1:9001");
  request.mutable_info()->set_cores(1);
  request.mutable_info()->set_identity("worker2");  // ignored: it is worker1
  v1::RegisterWorkerResponse registered;
  grpc::Status status =
      Stub("worker1")->RegisterWorker(Context().get(), request, &registered);
  ASSERT_TRUE(status.ok()) << status.error_message();

  v1::HeartbeatRequest heartbeat;
  heartbeat.set_worker_id(registered.worker_id());
  v1::HeartbeatResponse beat;
  grpc::Status other =
      Stub("worker2")->Heartbeat(Context().get(), heartbeat, &beat);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << other.error_message();
  v1::ReportRoundRequest report;
  report.set_worker_id(registered.worker_id());
  v1::ReportRoundResponse reported;
  EXPECT_EQ(Stub("worker2")
                ->ReportRound(Context().get(), report, &reported)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::LeaveWorkerRequest leave;
  leave.set_worker_id(registered.worker_id());
  v1::LeaveWorkerResponse left;
  EXPECT_EQ(
      Stub("worker2")->LeaveWorker(Context().get(), leave, &left).error_code(),
      grpc::StatusCode::PERMISSION_DENIED);

  grpc::Status own =
      Stub("worker1")->Heartbeat(Context().get(), heartbeat, &beat);
  EXPECT_TRUE(own.ok()) << own.error_message();

  v1::ListWorkersResponse workers;
  ASSERT_TRUE(
      Stub("operator")->ListWorkers(Context().get(), {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).info().identity(), "worker1");
}

// Every round assignment says which membership epoch its member list is
// of; a worker that says it holds that list gets the assignment without it
// (with 1,000 workers, building the list for every assignment was most of
// the coordinator's time), and with its identities otherwise.
TEST_F(MutualTlsTest, AnAssignmentLeavesOutTheMemberListTheCallerHolds) {
  std::map<std::string, uint64_t> ids;
  for (const std::string who : {"worker1", "worker2"}) {
    v1::RegisterWorkerRequest request;
    request.mutable_info()->set_address("127.0.0.1:9001");
    request.mutable_info()->set_cores(1);
    v1::RegisterWorkerResponse registered;
    ASSERT_TRUE(Stub(who)
                    ->RegisterWorker(Context().get(), request, &registered)
                    .ok());
    ids[who] = registered.worker_id();
  }
  v1::StartJobRequest start;
  v1::JobSpec& spec = *start.mutable_spec();
  spec.set_name("members-job");
  spec.mutable_data()->set_corpus_path("/data/corpus.txt");
  spec.mutable_stop()->set_max_rounds(10);
  spec.set_min_workers(2);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_d_model(16);
  spec.mutable_model()->set_heads(1);
  spec.mutable_model()->set_context(16);
  spec.mutable_outer()->set_local_steps(10);
  v1::StartJobResponse started;
  grpc::Status status =
      Stub("operator")->StartJob(Context().get(), start, &started);
  ASSERT_TRUE(status.ok()) << status.error_message();

  v1::GetAssignmentRequest ask;
  ask.set_worker_id(ids["worker1"]);
  ask.set_after_round(-1);
  ask.set_wait_ms(2000);
  v1::Assignment first;
  status = Stub("worker1")->GetAssignment(Context().get(), ask, &first);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(first.kind(), v1::ASSIGNMENT_KIND_ROUND);
  std::map<uint64_t, std::string> members;
  for (const v1::PeerAssignment& m : first.members())
    members[m.worker_id()] = m.identity();
  EXPECT_EQ(members, (std::map<uint64_t, std::string>{
                         {ids["worker1"], "worker1"},
                         {ids["worker2"], "worker2"}}));

  // Saying it holds this job's list of another epoch gets the list again;
  // saying it holds the current one leaves it out.
  ask.set_job_id(first.job_id());
  ask.set_after_round(static_cast<int64_t>(first.round()));
  ask.set_members_job_id(first.job_id());
  ask.set_members_epoch(first.members_epoch() + 1);
  v1::Assignment again;
  status = Stub("worker1")->GetAssignment(Context().get(), ask, &again);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(again.kind(), v1::ASSIGNMENT_KIND_ROUND);
  EXPECT_EQ(again.members_size(), 2);
  ask.set_members_epoch(first.members_epoch());
  v1::Assignment held;
  status = Stub("worker1")->GetAssignment(Context().get(), ask, &held);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(held.kind(), v1::ASSIGNMENT_KIND_ROUND);
  EXPECT_EQ(held.round(), again.round());
  EXPECT_EQ(held.members_size(), 0);
  EXPECT_EQ(held.members_epoch(), first.members_epoch());
}

constexpr size_t kArena = 20000;

// Worker 2's Peer service with named peer tokens; the roster says worker
// 1 is "w1" and worker 3 is "w3", as the coordinator's assignment would.
class SenderBindingTest : public ::testing::Test {
 protected:
  SenderBindingTest()
      : authenticator_(AuthOptions{
            .insecure = false,
            .tokens = {{.token = kW1, .role = Role::kPeer, .worker_name = "w1"},
                       {.token = kW3, .role = Role::kPeer, .worker_name = "w3"},
                       {.token = kCoordinatorToken,
                        .role = Role::kCoordinator,
                        .worker_name = ""}},
            .client_certificates = false}),
        mailbox_([] {
          MailboxOptions options;
          options.self_id = 2;
          options.early_chunk_wait = absl::Seconds(5);
          return options;
        }()),
        service_(&mailbox_, PeerOptions(&authenticator_, &roster_)),
        runner_(Loopback(TokensChecked())),
        model_(kArena),
        scratch_(kArena, -7.0f) {
    for (size_t i = 0; i < kArena; ++i)
      model_[i] = 1.0f + 0.25f * std::sin(static_cast<float>(i));
    v1::Assignment assignment;
    assignment.set_kind(v1::ASSIGNMENT_KIND_ROUND);
    for (auto [id, name] : {std::pair<uint64_t, const char*>{1, "w1"},
                            {2, "w2"},
                            {3, "w3"}}) {
      v1::PeerAssignment* member = assignment.add_members();
      member->set_worker_id(id);
      member->set_identity(name);
    }
    roster_.Learn(assignment);
    runner_.AddService(&service_);
    auto port = runner_.Start();
    EXPECT_TRUE(port.ok()) << port.status();
    address_ = absl::StrCat("127.0.0.1:", *port);
  }
  ~SenderBindingTest() override {
    mailbox_.Shutdown();
    runner_.Shutdown(absl::ZeroDuration());
  }

  // Worker 1's chunks for key_, as `sender_id`.
  std::vector<v1::ExchangeChunk> Chunks(uint64_t sender_id) {
    auto plan = PlanChunks(0, kArena, v1::WIRE_ENCODING_FP32, 16 << 10);
    EXPECT_TRUE(plan.ok());
    ChunkContext context{.key = key_,
                         .sender_id = sender_id,
                         .range_begin = 0,
                         .range_end = kArena,
                         .encoding = v1::WIRE_ENCODING_FP32,
                         .arena_elements = kArena};
    std::vector<v1::ExchangeChunk> chunks(plan->size());
    for (size_t i = 0; i < plan->size(); ++i)
      EXPECT_TRUE(EncodeChunk(context, model_, (*plan)[i],
                              i + 1 == plan->size(), &chunks[i])
                      .ok());
    return chunks;
  }

  grpc::Status Send(const std::vector<v1::ExchangeChunk>& chunks,
                    const std::string& token) {
    auto stub = v1::Peer::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    context.AddMetadata("authorization", "Bearer " + token);
    auto stream = stub->Exchange(&context);
    for (const v1::ExchangeChunk& chunk : chunks)
      if (!stream->Write(chunk)) break;
    stream->WritesDone();
    v1::ExchangeChunk ack;
    while (stream->Read(&ack)) {
    }
    return stream->Finish();
  }

  static constexpr char kW1[] = "peer-token-of-w1-0123456789";
  static constexpr char kW3[] = "peer-token-of-w3-0123456789";
  static constexpr char kCoordinatorToken[] = "coordinator-token-0123456789";
  TransferKey key_{.job_id = 4,
                   .round = 12,
                   .phase = v1::EXCHANGE_PHASE_GOSSIP,
                   .step = 0};
  Authenticator authenticator_;
  PeerRoster roster_;
  Mailbox mailbox_;
  PeerService service_;
  ServerRunner runner_;
  std::string address_;
  std::vector<float> model_, scratch_;
};

TEST_F(SenderBindingTest, ForgedSenderIsRefusedAndHonestTransferCommits) {
  IncomingTransfer in{.peer_id = 1, .buffer = scratch_, .range_begin = 0,
                      .range_end = kArena};
  ASSERT_TRUE(
      mailbox_.Expect(key_, {&in, 1}, absl::Now() + absl::Seconds(10)).ok());
  // w3 writes worker 1's sender_id: refused at once, nothing written.
  const absl::Time start = absl::Now();
  grpc::Status forged = Send(Chunks(1), kW3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << forged.error_message();
  EXPECT_THAT(forged.error_message(), HasSubstr("sender_id 1"));
  EXPECT_EQ(scratch_, std::vector<float>(kArena, -7.0f));
  // An id the coordinator never scheduled is refused too.
  grpc::Status stranger = Send(Chunks(9), kW3);
  EXPECT_EQ(stranger.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(stranger.error_message(), HasSubstr("not in this worker's schedule"));
  // The honest sender still commits.
  grpc::Status honest = Send(Chunks(1), kW1);
  EXPECT_TRUE(honest.ok()) << honest.error_message();
  TransferOutcome out = mailbox_.Await(key_, 1);
  EXPECT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(scratch_, model_);
}

// The coordinator's token (gaslocctl job export's relay) reads a model and
// nothing else: FetchModel of the parameters alone, never Exchange.
TEST_F(SenderBindingTest, TheCoordinatorFetchesTheParametersButCannotExchange) {
  std::vector<float> outer(kArena, 3.0f), moments(kArena, 0.5f);
  service_.SetModelProvider([&](uint64_t job_id) {
    return ModelSnapshot{.job_id = job_id, .round = 9, .params = model_,
                         .outer_state = outer, .optimizer_m = moments,
                         .optimizer_v = moments, .optimizer_step = 7,
                         .keep_alive = nullptr};
  });
  auto stub = v1::Peer::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  for (bool parameters_only : {false, true}) {
    SCOPED_TRACE(parameters_only);
    v1::FetchModelRequest request;
    request.set_job_id(4);
    request.set_parameters_only(parameters_only);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    context.AddMetadata("authorization",
                        std::string("Bearer ") + kCoordinatorToken);
    auto reader = stub->FetchModel(&context, request);
    ModelAssembler assembler(4, 0, kArena, kArena);
    v1::ExchangeChunk chunk;
    while (reader->Read(&chunk)) ASSERT_TRUE(assembler.Add(chunk).ok());
    grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    auto fetched = assembler.Finish();
    ASSERT_TRUE(fetched.ok()) << fetched.status();
    EXPECT_EQ(fetched->params, model_);
    EXPECT_EQ(fetched->outer_state.size(), parameters_only ? 0u : kArena);
    EXPECT_EQ(fetched->optimizer_m.size(), parameters_only ? 0u : kArena);
  }
  grpc::Status exchange = Send(Chunks(1), kCoordinatorToken);
  EXPECT_EQ(exchange.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << exchange.error_message();
  EXPECT_THAT(exchange.error_message(), HasSubstr("needs the peer role"));
  EXPECT_EQ(scratch_, std::vector<float>(kArena, -7.0f));
}

TEST_F(SenderBindingTest, FetchModelOnlyForTheCallersOwnId) {
  auto stub = v1::Peer::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  v1::FetchModelRequest request;
  request.set_job_id(4);
  request.set_requester_id(1);  // w1's id, asked for by w3
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  context.AddMetadata("authorization", std::string("Bearer ") + kW3);
  auto reader = stub->FetchModel(&context, request);
  v1::ExchangeChunk chunk;
  while (reader->Read(&chunk)) {
  }
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("requester_id 1"));
}

}  // namespace
}  // namespace gasloc
