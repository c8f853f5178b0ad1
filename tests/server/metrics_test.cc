// The worker's and the coordinator's metrics served by the real /metrics
// endpoint (prometheus-cpp Exposer on a free loopback port, the same code
// the daemons run) after driving each through a job, checked against the
// tables of docs/metrics.md in both directions: every documented metric is
// exposed with the documented type and labels, every exposed gasloc_
// metric is documented, and names follow the unit conventions. Plus the
// values the counters and gauges must show.
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "gmock/gmock.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/coordinator_service.h"
#include "server/metrics_endpoint.h"
#include "tests/support/exposition.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_auth.h"
#include "worker/round/worker_metrics.h"

namespace gasloc::testing {
namespace {

std::string MetricsDoc() {
  std::ifstream in(absl::StrCat(GASLOC_SOURCE_DIR, "/docs/metrics.md"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Serves `collectables` on a free port and returns one scrape.
Scrape ScrapeOf(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  const int port = PickFreePort();
  auto exposer = StartMetricsEndpoint(port, collectables);
  EXPECT_TRUE(exposer.ok()) << exposer.status();
  if (!exposer.ok()) return {};
  auto page = HttpGet(port, "/metrics");
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? ParseExposition(*page) : Scrape{};
}

// The documented table of `section` against `scrape`, both directions.
void ExpectMatchesDoc(const Scrape& scrape, const std::string& section,
                      const std::string& prefix) {
  const std::vector<DocumentedMetric> documented =
      DocumentedMetrics(MetricsDoc(), section);
  ASSERT_GE(documented.size(), 10u) << "no table under ## " << section;
  std::set<std::string> names;
  for (const DocumentedMetric& doc : documented) {
    SCOPED_TRACE(doc.name);
    EXPECT_TRUE(names.insert(doc.name).second) << "documented twice";
    EXPECT_TRUE(absl::StartsWith(doc.name, prefix));
    // Conventions: counters and only counters end in _total; the unit
    // column and the name agree on base units.
    EXPECT_EQ(absl::EndsWith(doc.name, "_total"), doc.type == "counter");
    const std::string base(absl::StripSuffix(doc.name, "_total"));
    EXPECT_EQ(absl::EndsWith(base, "_seconds"), doc.unit == "seconds");
    EXPECT_EQ(absl::EndsWith(base, "_bytes"), doc.unit == "bytes");
    for (const char* bad : {"_milliseconds", "_ms", "_minutes", "_kb", "_mb"})
      EXPECT_FALSE(absl::StrContains(doc.name, bad));
    EXPECT_FALSE(doc.labels.count("round")) << "never a round label";
    EXPECT_FALSE(doc.labels.count("job")) << "`job` is Prometheus's own label";
    EXPECT_FALSE(doc.meaning.empty());
    auto it = scrape.families.find(doc.name);
    if (it == scrape.families.end()) {
      ADD_FAILURE() << "documented but not exposed";
      continue;
    }
    EXPECT_EQ(it->second.type, doc.type);
    EXPECT_EQ(it->second.labels, doc.labels);
  }
  for (const auto& [name, family] : scrape.families) {
    if (!absl::StartsWith(name, "gasloc_")) continue;
    EXPECT_TRUE(names.count(name))
        << name << " (" << family.type << ") is exposed but not in the "
        << section << " table of docs/metrics.md";
  }
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("metrics");
  spec.mutable_data()->set_corpus_path("/data/corpus.txt");
  spec.mutable_stop()->set_max_rounds(100);
  spec.set_min_workers(2);
  spec.mutable_model()->set_layers(1);
  spec.mutable_model()->set_d_model(16);
  spec.mutable_model()->set_heads(1);
  spec.mutable_model()->set_context(16);
  spec.mutable_outer()->set_local_steps(100);
  spec.mutable_outer()->set_min_local_steps(10);
  return spec;
}

// A worker through one job: steps, a round with a timed-out peer, an
// error, a checkpoint.
void DriveWorker(WorkerMetrics& metrics, uint64_t job_id) {
  metrics.RecordCompute("avx2", "avx2", "emulated");
  metrics.BeginJob(job_id, 3);
  metrics.RecordRoundStart(8);
  for (int i = 0; i < 8; ++i) metrics.RecordStep(0.02, 256, 3.5 - 0.1 * i, 12800);
  v1::ReportRoundRequest report;
  report.set_inner_steps(8);
  report.set_tokens(2048);
  report.set_train_loss(3.15f);
  report.set_val_bpb(4.5f);
  report.set_bytes_sent(1000);
  report.set_bytes_received(900);
  report.set_wait_seconds(0.25);
  report.set_compute_seconds(0.16);
  report.set_exchange_seconds(0.3);
  report.set_peer_distance(1.5f);
  report.add_failed_peers(4);
  metrics.RecordRound(report, 0.5, {absl::StatusCode::kDeadlineExceeded});
  metrics.RecordRoundError(absl::StatusCode::kInternal);
  metrics.RecordCheckpoint(0.05);
}

// --metrics_address: the endpoint binds where it is told (127.0.0.1: this
// machine only); a malformed or foreign address is a clear error.
TEST(MetricsEndpoint, BindsTheConfiguredAddress) {
  auto registry = std::make_shared<prometheus::Registry>();
  const int port = PickFreePort();
  auto local = StartMetricsEndpoint(port, {registry}, "127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_TRUE(HttpGet(port, "/metrics").ok());
  auto bad = StartMetricsEndpoint(PickFreePort(), {registry}, "a, b");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("--metrics_address"));
  auto foreign = StartMetricsEndpoint(PickFreePort(), {registry}, "203.0.113.7");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kUnavailable);
}

TEST(WorkerMetricsTest, EndpointMatchesDocsAndCountsARound) {
  auto registry = std::make_shared<prometheus::Registry>();
  FakeClock clock;
  WorkerMetrics metrics(*registry, &clock);
  DriveWorker(metrics, 7);  // checkpoints at the clock's start
  clock.Advance(absl::Seconds(42) + absl::Milliseconds(250));
  const Scrape scrape = ScrapeOf({registry, metrics.scrape_gauges()});
  ExpectMatchesDoc(scrape, "gasloc-worker", "gasloc_worker_");

  const std::map<std::string, std::string> job = {{"job_id", "7"},
                                                  {"worker_id", "3"}};
  EXPECT_EQ(scrape.Value("gasloc_worker_inner_steps_total", job), 8);
  EXPECT_EQ(scrape.Value("gasloc_worker_tokens_total", job), 2048);
  EXPECT_EQ(scrape.Value("gasloc_worker_outer_rounds_total", job), 1);
  EXPECT_EQ(scrape.Value("gasloc_worker_local_steps", job), 8);
  EXPECT_EQ(scrape.Value("gasloc_worker_peer_wait_seconds_total", job), 0.25);
  EXPECT_EQ(scrape.Value("gasloc_worker_peer_sent_bytes_total", job), 1000);
  EXPECT_EQ(scrape.Value("gasloc_worker_inner_step_duration_seconds_count", job), 8);
  EXPECT_NEAR(*scrape.Value("gasloc_worker_train_loss", job), 3.15, 1e-6);
  EXPECT_EQ(scrape.Value("gasloc_worker_exchange_failures_total",
                         {{"job_id", "7"}, {"reason", "deadline"}}),
            1);
  EXPECT_EQ(scrape.Value("gasloc_worker_exchange_failures_total",
                         {{"job_id", "7"}, {"reason", "rejected"}}),
            0);
  EXPECT_EQ(scrape.Value("gasloc_worker_round_errors_total",
                         {{"job_id", "7"}, {"reason", "INTERNAL"}}),
            1);
  // The age is the injected clock's time since the checkpoint, exactly.
  EXPECT_EQ(scrape.Value("gasloc_worker_checkpoint_age_seconds", job), 42.25);
}

TEST(WorkerMetricsTest, CheckpointAgeIsReadAtScrapeTimeAndResetByACheckpoint) {
  auto registry = std::make_shared<prometheus::Registry>();
  FakeClock clock;
  WorkerMetrics metrics(*registry, &clock);
  DriveWorker(metrics, 7);
  const std::map<std::string, std::string> job = {{"job_id", "7"},
                                                  {"worker_id", "3"}};
  const int port = PickFreePort();
  auto exposer =
      StartMetricsEndpoint(port, {registry, metrics.scrape_gauges()});
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  auto age = [&]() -> std::optional<double> {
    auto page = HttpGet(port, "/metrics");
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return std::nullopt;
    return ParseExposition(*page).Value("gasloc_worker_checkpoint_age_seconds",
                                        job);
  };
  EXPECT_EQ(age(), 0);
  clock.Advance(absl::Seconds(90));
  EXPECT_EQ(age(), 90) << "no write since: the age grows with the clock";
  metrics.RecordCheckpoint(0.05);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(age(), 3);
}

TEST(WorkerMetricsTest, NextJobReplacesThePreviousJobsSeries) {
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(*registry);
  DriveWorker(metrics, 7);
  metrics.BeginJob(8, 3);
  metrics.RecordStep(0.02, 100, 3.0, 5000);
  const Scrape scrape = ScrapeOf({registry, metrics.scrape_gauges()});
  EXPECT_FALSE(scrape.Value("gasloc_worker_tokens_total", {{"job_id", "7"}}));
  EXPECT_EQ(scrape.Value("gasloc_worker_tokens_total", {{"job_id", "8"}}), 100);
  // No checkpoint of job 8 yet: no age.
  EXPECT_FALSE(scrape.Value("gasloc_worker_checkpoint_age_seconds"));
}

TEST(WorkerMetricsTest, FailureReasonsFromStatusCodes) {
  EXPECT_EQ(ExchangeFailureReason(absl::StatusCode::kDeadlineExceeded), "deadline");
  EXPECT_EQ(ExchangeFailureReason(absl::StatusCode::kDataLoss), "invalid");
  EXPECT_EQ(ExchangeFailureReason(absl::StatusCode::kFailedPrecondition), "rejected");
  EXPECT_EQ(ExchangeFailureReason(absl::StatusCode::kPermissionDenied), "poisoned");
  EXPECT_EQ(ExchangeFailureReason(absl::StatusCode::kResourceExhausted), "other");
}

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator::CoordinatorOptions options;
    options.lease = absl::Seconds(10);
    options.metrics = &metrics_;
    auto c = coordinator::Coordinator::Create(options, nullptr, &clock_);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    CoordinatorServiceOptions service_options;
    service_options.metrics = &metrics_;
    service_options.authenticator = &testing::InsecureAuthenticator();
    service_ = std::make_unique<CoordinatorService>(coord_.get(), service_options);
  }

  uint64_t Register(int host) {
    grpc::ServerContext context;
    v1::RegisterWorkerRequest request;
    request.mutable_info()->set_address(absl::StrCat("10.0.0.", host, ":7000"));
    request.mutable_info()->set_cores(4);
    v1::RegisterWorkerResponse response;
    EXPECT_TRUE(service_->RegisterWorker(&context, &request, &response).ok());
    return response.worker_id();
  }

  v1::Assignment Ask(uint64_t worker, uint64_t job, int64_t after) {
    grpc::ServerContext context;
    v1::GetAssignmentRequest request;
    request.set_worker_id(worker);
    request.set_job_id(job);
    request.set_after_round(after);
    request.set_wait_ms(1);
    v1::Assignment assignment;
    EXPECT_TRUE(service_->GetAssignment(&context, &request, &assignment).ok());
    return assignment;
  }

  void Report(uint64_t worker, uint64_t job, uint64_t round, double compute_s) {
    grpc::ServerContext context;
    v1::ReportRoundRequest request;
    request.set_worker_id(worker);
    request.set_job_id(job);
    request.set_round(round);
    request.set_inner_steps(100);
    request.set_compute_seconds(compute_s);
    request.set_train_loss(3.0f);
    v1::ReportRoundResponse response;
    EXPECT_TRUE(service_->ReportRound(&context, &request, &response).ok());
  }

  FakeClock clock_;
  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
  coordinator::CoordinatorMetrics metrics_{*registry_};
  std::unique_ptr<coordinator::Coordinator> coord_;
  std::unique_ptr<CoordinatorService> service_;
};

TEST_F(CoordinatorMetricsTest, EndpointMatchesDocsAndCountsEvents) {
  const uint64_t a = Register(1), b = Register(2), c = Register(3);
  v1::StartJobRequest start;
  *start.mutable_spec() = Spec();
  v1::StartJobResponse started;
  {
    grpc::ServerContext context;
    ASSERT_TRUE(service_->StartJob(&context, &start, &started).ok());
  }
  const uint64_t job = started.job().job_id();
  // Worker c leaves at once; a and b run rounds 0 to 2; b is 4x slower,
  // so its budget drops (adaptive) when round 2 is planned (round 0's rates
  // are the members' warm-up).
  {
    grpc::ServerContext context;
    v1::LeaveWorkerRequest leave;
    leave.set_worker_id(c);
    v1::LeaveWorkerResponse left;
    ASSERT_TRUE(service_->LeaveWorker(&context, &leave, &left).ok());
  }
  Ask(a, job, -1);
  Ask(b, job, -1);
  Report(a, job, 0, 10);
  Report(b, job, 0, 40);
  EXPECT_EQ(Ask(a, job, 0).round(), 1u);
  EXPECT_EQ(Ask(b, job, 0).round(), 1u);
  Report(a, job, 1, 10);
  Report(b, job, 1, 40);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Ask(a, job, 1).round(), 2u);
  {
    grpc::ServerContext context;  // an RPC error: unknown job
    v1::GetJobRequest request;
    request.set_job_id(999);
    v1::GetJobResponse response;
    EXPECT_FALSE(service_->GetJob(&context, &request, &response).ok());
  }

  const Scrape scrape =
      ScrapeOf({registry_, coordinator::CoordinatorGauges(coord_.get())});
  ExpectMatchesDoc(scrape, "gasloc-coordinator", "gasloc_coordinator_");
  const std::string id = absl::StrCat(job);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_live_workers"), 2);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_jobs", {{"state", "running"}}), 1);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_jobs", {{"state", "failed"}}), 0);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_membership_epoch", {{"job_id", id}}), 1);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_job_members", {{"job_id", id}}), 2);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_rounds_planned_total", {{"job_id", id}}), 3);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_round_planning_duration_seconds_count"), 3);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_worker_joins_total", {{"reason", "registered"}}), 3);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_worker_leaves_total", {{"reason", "left"}}), 1);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_budget_changes_total",
                         {{"job_id", id}, {"reason", "adaptive"}}),
            1);
  // a asked 2 s after b's last call.
  EXPECT_EQ(scrape.Value("gasloc_coordinator_worker_heartbeat_age_seconds",
                         {{"worker_id", absl::StrCat(a)}}),
            0);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_worker_heartbeat_age_seconds",
                         {{"worker_id", absl::StrCat(b)}}),
            2);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_rpcs_total", {{"method", "GetAssignment"}}), 5);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_rpc_errors_total",
                         {{"method", "GetJob"}, {"code", "NOT_FOUND"}}),
            1);
}

TEST_F(CoordinatorMetricsTest, ExpiredLeaseAndEndedJob) {
  const uint64_t a = Register(1);
  Register(2);
  v1::JobSpec spec = Spec();
  spec.set_min_workers(1);
  spec.set_max_workers(1);
  auto job = coord_->StartJob(spec);
  ASSERT_TRUE(job.ok());
  Ask(a, job->job_id(), -1);
  ASSERT_TRUE(coord_->StopJob(job->job_id(), "test").ok());
  clock_.Advance(absl::Seconds(11));
  coord_->Tick();
  const Scrape scrape =
      ScrapeOf({registry_, coordinator::CoordinatorGauges(coord_.get())});
  EXPECT_EQ(scrape.Value("gasloc_coordinator_worker_leaves_total",
                         {{"reason", "lease_expired"}}),
            2);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_live_workers"), 0);
  EXPECT_EQ(scrape.Value("gasloc_coordinator_jobs", {{"state", "stopped"}}), 1);
  // An ended job's series are gone.
  EXPECT_FALSE(scrape.Value("gasloc_coordinator_rounds_planned_total"));
  EXPECT_FALSE(scrape.Value("gasloc_coordinator_membership_epoch"));
}

TEST(CoordinatorMetricsReasonTest, BudgetChangeReasons) {
  coordinator::Budget b;
  b.basis = coordinator::Budget::Basis::kAdaptive;
  b.min_steps = 10;
  b.nominal_steps = 100;
  b.raw_steps = 5;
  EXPECT_STREQ(coordinator::BudgetChangeReason(b), "min_clamp");
  b.raw_steps = 150;
  EXPECT_STREQ(coordinator::BudgetChangeReason(b), "nominal_clamp");
  // Above H, within the ceiling H_max: T was set by a slow exchange.
  b.max_steps = 400;
  b.local_steps = 150;
  EXPECT_STREQ(coordinator::BudgetChangeReason(b), "stretched");
  b.raw_steps = 450;
  b.local_steps = 400;
  EXPECT_STREQ(coordinator::BudgetChangeReason(b), "nominal_clamp");
  b.raw_steps = 50;
  b.local_steps = 50;
  EXPECT_STREQ(coordinator::BudgetChangeReason(b), "adaptive");
  b.basis = coordinator::Budget::Basis::kUniform;
  EXPECT_STREQ(coordinator::BudgetChangeReason(b), "uniform");
}

}  // namespace
}  // namespace gasloc::testing
