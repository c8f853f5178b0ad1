// The shipped observability configuration against a real cluster: a
// gasloc-coordinator and two gasloc-worker daemons run a tiny GASLoC job
// with /metrics on; the real Prometheus server (Debian package
// `prometheus`) runs deploy/prometheus/prometheus.yml, rewritten only in
// its target addresses, its file_sd targets file, its intervals (1 s) and
// its storage path; one worker is a static target, the other comes from
// file-based service discovery. Then, through Prometheus's HTTP API:
//
// - every target is up;
// - the dashboard's `job` variable (label_values) finds the running job;
// - EVERY expression of deploy/grafana/dashboards/gasloc.json (with $job
//   and $__rate_interval substituted) parses and returns data;
// - EVERY rule of deploy/prometheus/gasloc-alerts.yml is loaded, its
//   expression parses and evaluates, and its health is ok;
// - every gasloc_ metric any expression names exists in Prometheus, and
//   every gasloc_ metric Prometheus scraped is documented in
//   docs/metrics.md;
// - and, so the check above cannot pass vacuously, a panel query whose
//   metric name is misspelt returns no data.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/support/exposition.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait_for.h"

namespace gasloc::testing {
namespace {

namespace fs = std::filesystem;
using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// Grafana's $__rate_interval is at least 4 scrape intervals; the test
// scrapes every second.
constexpr char kRateInterval[] = "15s";

std::string Source(const std::string& path) {
  return absl::StrCat(GASLOC_SOURCE_DIR, "/", path);
}

std::string UrlEncode(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

const Value* Field(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

// Replaces the one occurrence of `from` in `text`; fails if there is not
// exactly one, so the rewrite breaks loudly when the shipped file changes.
void ReplaceOnce(std::string* text, const std::string& from,
                 const std::string& to) {
  size_t count = 0;
  for (size_t pos = text->find(from); pos != std::string::npos;
       pos = text->find(from, pos + 1))
    ++count;
  ASSERT_EQ(count, 1u) << "expected exactly one '" << from
                       << "' in deploy/prometheus/prometheus.yml";
  text->replace(text->find(from), from.size(), to);
}

// Every "expr" of the dashboard's panels (rows included), and the uid of
// every data source a panel or query names.
void CollectPanelExprs(const ListValue& panels, std::vector<std::string>* exprs,
                       std::vector<std::string>* uids) {
  auto add_uid = [uids](const Struct& s) {
    if (const Value* ds = Field(s, "datasource"))
      if (const Value* uid = Field(ds->struct_value(), "uid"))
        uids->push_back(uid->string_value());
  };
  for (const Value& panel : panels.values()) {
    const Struct& p = panel.struct_value();
    add_uid(p);
    if (const Value* targets = Field(p, "targets")) {
      for (const Value& target : targets->list_value().values()) {
        add_uid(target.struct_value());
        if (const Value* expr = Field(target.struct_value(), "expr"))
          exprs->push_back(expr->string_value());
      }
    }
    if (const Value* nested = Field(p, "panels"))
      CollectPanelExprs(nested->list_value(), exprs, uids);
  }
}

// A Prometheus server on a free loopback port with the shipped
// configuration pointed at this test's processes.
class PrometheusServer {
 public:
  void Start(const std::string& dir, int coordinator_port,
             int static_worker_port, int discovered_worker_port) {
    ASSERT_TRUE(fs::exists(GASLOC_PROMETHEUS_BINARY))
        << "no prometheus binary (" << GASLOC_PROMETHEUS_BINARY
        << "): run scripts/install_deps.sh, then cmake --preset ci again";
    const std::string config_dir = absl::StrCat(dir, "/prometheus");
    fs::remove_all(config_dir);
    fs::copy(Source("deploy/prometheus"), config_dir,
             fs::copy_options::recursive);
    std::string config = ReadFile(Source("deploy/prometheus/prometheus.yml"));
    ReplaceOnce(&config, "scrape_interval: 15s", "scrape_interval: 1s");
    ReplaceOnce(&config, "scrape_timeout: 10s", "scrape_timeout: 1s");
    ReplaceOnce(&config, "evaluation_interval: 15s", "evaluation_interval: 1s");
    ReplaceOnce(&config, "\"gasloc-coordinator:9464\"",
                absl::StrCat("\"127.0.0.1:", coordinator_port, "\""));
    ReplaceOnce(&config, "\"gasloc-worker-0:9465\"",
                absl::StrCat("\"127.0.0.1:", static_worker_port, "\""));
    std::ofstream(absl::StrCat(config_dir, "/prometheus.yml")) << config;
    // The shipped example targets file, replaced by this test's worker.
    const std::string targets = absl::StrCat(config_dir, "/targets/gasloc-workers.yml");
    ASSERT_TRUE(fs::exists(targets));
    std::ofstream(targets) << "- targets: [\"127.0.0.1:" << discovered_worker_port
                           << "\"]\n  labels: {pool: \"test\"}\n";

    port_ = PickFreePort();
    auto child = Subprocess::Start(
        {GASLOC_PROMETHEUS_BINARY,
         absl::StrCat("--config.file=", config_dir, "/prometheus.yml"),
         absl::StrCat("--storage.tsdb.path=", dir, "/prometheus-data"),
         absl::StrCat("--web.listen-address=127.0.0.1:", port_)},
        absl::StrCat(dir, "/prometheus.log"));
    ASSERT_TRUE(child.ok()) << child.status();
    process_ = std::make_unique<Subprocess>(std::move(*child));
    ASSERT_TRUE(WaitFor([&] { return HttpGet(port_, "/-/ready").ok(); },
                        absl::Seconds(30), absl::Milliseconds(100)))
        << "prometheus not ready; log:\n"
        << ReadFile(absl::StrCat(dir, "/prometheus.log"));
  }

  void Stop() {
    if (process_ == nullptr) return;
    process_->Signal(SIGTERM);
    (void)process_->Wait(absl::Seconds(20));
  }

  // GET /api/v1/<path>: the "data" of a successful answer, or the error.
  int port() const { return port_; }

  absl::StatusOr<Value> Api(const std::string& path) const {
    auto body = HttpGet(port_, absl::StrCat("/api/v1/", path));
    if (!body.ok()) return body.status();
    Struct answer;
    auto parsed = google::protobuf::util::JsonStringToMessage(*body, &answer);
    if (!parsed.ok())
      return absl::InternalError(absl::StrCat("bad JSON: ", body->substr(0, 300)));
    const Value* status = Field(answer, "status");
    if (status == nullptr || status->string_value() != "success")
      return absl::InvalidArgumentError(*body);
    const Value* data = Field(answer, "data");
    return data == nullptr ? Value() : *data;
  }

  // Instant query: the result list (vector) or the [time, value] pair
  // (scalar).
  absl::StatusOr<ListValue> Query(const std::string& promql) const {
    auto data = Api(absl::StrCat("query?query=", UrlEncode(promql)));
    if (!data.ok()) return data.status();
    return Field(data->struct_value(), "result")->list_value();
  }

 private:
  int port_ = 0;
  std::unique_ptr<Subprocess> process_;
};

TEST(ObservabilityTest, ShippedDashboardAndAlertsWorkAgainstARealCluster) {
  const absl::Time test_start = absl::Now();
  Cluster cluster("observability");
  const int coordinator_metrics = PickFreePort();
  const int worker0_metrics = PickFreePort();
  const int worker1_metrics = PickFreePort();
  ASSERT_NO_FATAL_FAILURE(cluster.StartCoordinator(coordinator_metrics));
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorkers(2, {worker0_metrics, worker1_metrics}));
  // Long enough to be running through the whole test; stopped at the end.
  const uint64_t job =
      cluster.StartJob(cluster.TinySpec(v1::ALGORITHM_GASLOC, 100000, 2));
  ASSERT_NE(job, 0u);
  {
    // One failing RPC, for the RPC-errors panel.
    grpc::ClientContext context;
    v1::GetJobRequest request;
    request.set_job_id(job + 1000);
    v1::GetJobResponse response;
    EXPECT_EQ(cluster.stub().GetJob(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  PrometheusServer prometheus;
  ASSERT_NO_FATAL_FAILURE(prometheus.Start(cluster.dir(), coordinator_metrics,
                                           worker0_metrics, worker1_metrics));

  // The dashboard and its `job` variable.
  Struct dashboard;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  ReadFile(Source("deploy/grafana/dashboards/gasloc.json")),
                  &dashboard)
                  .ok());
  const Value* templating = Field(dashboard, "templating");
  ASSERT_NE(templating, nullptr);
  const auto& variables = Field(templating->struct_value(), "list")->list_value();
  ASSERT_EQ(variables.values_size(), 1);
  const Struct& variable = variables.values(0).struct_value();
  EXPECT_EQ(Field(variable, "name")->string_value(), "job");
  const std::string definition = Field(variable, "definition")->string_value();
  std::smatch match;
  static const std::regex kLabelValues(R"(^label_values\((.+),\s*(\w+)\)$)");
  ASSERT_TRUE(std::regex_match(definition, match, kLabelValues)) << definition;
  const std::string variable_query =
      absl::StrCat("count by (", match[2].str(), ") (", match[1].str(), ")");
  // Each wait below retries a query until the data has landed (scrapes
  // every second); a query that fails ends the wait and the test.
  std::set<std::string> job_values;
  absl::Status query_status;
  const bool listed = WaitFor(
      [&] {
        auto result = prometheus.Query(variable_query);
        if (!result.ok()) {
          query_status = result.status();
          return true;
        }
        for (const Value& series : result->values())
          job_values.insert(
              Field(Field(series.struct_value(), "metric")->struct_value(),
                    match[2].str())
                  ->string_value());
        return job_values.count(absl::StrCat(job)) > 0;
      },
      absl::Seconds(40), absl::Milliseconds(500));
  ASSERT_TRUE(query_status.ok()) << variable_query << ": " << query_status;
  ASSERT_TRUE(listed && job_values.count(absl::StrCat(job)))
      << "the dashboard's job variable never listed job " << job << "; logs in "
      << cluster.dir();

  // Every target up: the coordinator, the static and the discovered worker
  // (each scraped at least once; discovery may take a moment).
  for (const auto& [scrape_job, expected] :
       std::vector<std::pair<std::string, int>>{{"gasloc-coordinator", 1},
                                                {"gasloc-worker", 2}}) {
    const std::string query = absl::StrCat("up{job=\"", scrape_job, "\"} == 1");
    int up_count = 0;
    WaitFor(
        [&] {
          auto up = prometheus.Query(query);
          if (!up.ok()) {
            query_status = up.status();
            return true;
          }
          up_count = up->values_size();
          return up_count >= expected;
        },
        absl::Seconds(20), absl::Milliseconds(250));
    ASSERT_TRUE(query_status.ok()) << query << ": " << query_status;
    EXPECT_EQ(up_count, expected)
        << scrape_job << " targets up; targets: "
        << HttpGet(prometheus.port(), "/api/v1/targets").value_or("?");
  }

  // Every panel expression: parses, and returns data once a few rounds
  // have been scraped (retried for up to 40 s while data lands).
  std::vector<std::string> panel_exprs, datasource_uids;
  CollectPanelExprs(Field(dashboard, "panels")->list_value(), &panel_exprs,
                    &datasource_uids);
  // Every query goes to the data source the provisioning file defines.
  const std::string provisioned =
      ReadFile(Source("deploy/grafana/provisioning/datasources/gasloc.yml"));
  for (const std::string& uid : datasource_uids)
    EXPECT_THAT(provisioned, ::testing::HasSubstr(absl::StrCat("uid: ", uid)))
        << "the dashboard uses data source " << uid
        << ", which deploy/grafana/provisioning does not define";
  ASSERT_GE(panel_exprs.size(), 20u);
  for (std::string& expr : panel_exprs) {
    expr = absl::StrReplaceAll(expr, {{"${job}", absl::StrCat(job)},
                                      {"$job", absl::StrCat(job)},
                                      {"$__rate_interval", kRateInterval}});
    EXPECT_FALSE(absl::StrContains(expr, "$")) << "unsubstituted: " << expr;
  }
  std::vector<std::string> empty;
  WaitFor(
      [&] {
        empty.clear();
        for (const std::string& expr : panel_exprs) {
          auto result = prometheus.Query(expr);
          if (!result.ok()) {
            query_status = Annotate(result.status(), expr);
            return true;
          }
          if (result->values_size() == 0) empty.push_back(expr);
        }
        return empty.empty();
      },
      absl::Seconds(40), absl::Milliseconds(500));
  ASSERT_TRUE(query_status.ok())
      << "a panel query does not evaluate: " << query_status;
  for (const std::string& expr : empty)
    ADD_FAILURE() << "panel query returned no data: " << expr;

  // The check above can fail: a misspelt metric returns nothing.
  {
    std::string wrong = panel_exprs[0];
    const size_t at = wrong.find("gasloc_");
    ASSERT_NE(at, std::string::npos);
    wrong.insert(at + 7, "no_such_");
    auto result = prometheus.Query(wrong);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->values_size(), 0) << wrong;
  }

  // Every alert rule: loaded from the shipped file, evaluates, healthy.
  const std::string rules_file = ReadFile(Source("deploy/prometheus/gasloc-alerts.yml"));
  size_t shipped_alerts = 0;
  for (size_t pos = rules_file.find("- alert:"); pos != std::string::npos;
       pos = rules_file.find("- alert:", pos + 1))
    ++shipped_alerts;
  std::vector<std::string> rule_exprs;
  std::vector<std::string> unhealthy;
  WaitFor(
      [&] {
        rule_exprs.clear();
        unhealthy.clear();
        auto rules = prometheus.Api("rules");
        if (!rules.ok()) {
          query_status = rules.status();
          return true;
        }
        for (const Value& group :
             Field(rules->struct_value(), "groups")->list_value().values()) {
          for (const Value& rule :
               Field(group.struct_value(), "rules")->list_value().values()) {
            const Struct& r = rule.struct_value();
            rule_exprs.push_back(Field(r, "query")->string_value());
            if (Field(r, "health")->string_value() != "ok")
              unhealthy.push_back(
                  absl::StrCat(Field(r, "name")->string_value(), ": ",
                               Field(r, "health")->string_value()));
          }
        }
        return unhealthy.empty();
      },
      absl::Seconds(20), absl::Milliseconds(500));
  ASSERT_TRUE(query_status.ok()) << "rules: " << query_status;
  EXPECT_EQ(rule_exprs.size(), shipped_alerts) << "rules loaded vs shipped";
  EXPECT_THAT(unhealthy, ::testing::IsEmpty());
  for (const std::string& expr : rule_exprs) {
    auto result = prometheus.Query(expr);
    EXPECT_TRUE(result.ok()) << "alert expression does not evaluate: " << expr
                             << "\n" << result.status();
  }

  // Metric names: every one used exists; every one scraped is documented.
  auto names = prometheus.Api("label/__name__/values");
  ASSERT_TRUE(names.ok()) << names.status();
  std::set<std::string> scraped;
  for (const Value& name : names->list_value().values())
    scraped.insert(name.string_value());
  static const std::regex kMetric(R"(gasloc_[a-z0-9_]+)");
  std::vector<std::string> all_exprs = panel_exprs;
  all_exprs.insert(all_exprs.end(), rule_exprs.begin(), rule_exprs.end());
  for (const std::string& expr : all_exprs) {
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kMetric);
         it != std::sregex_iterator(); ++it)
      EXPECT_TRUE(scraped.count(it->str()))
          << it->str() << " (in " << expr << ") was never scraped";
  }
  std::set<std::string> documented;
  const std::string doc = ReadFile(Source("docs/metrics.md"));
  for (const char* section : {"gasloc-worker", "gasloc-coordinator"})
    for (const DocumentedMetric& m : DocumentedMetrics(doc, section))
      documented.insert(m.name);
  size_t gasloc_names = 0;
  for (const std::string& name : scraped) {
    if (!absl::StartsWith(name, "gasloc_")) continue;
    ++gasloc_names;
    std::string base = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!documented.count(base) && absl::EndsWith(base, suffix))
        base = std::string(absl::StripSuffix(base, suffix));
    EXPECT_TRUE(documented.count(base)) << name << " is not in docs/metrics.md";
  }

  std::cout << "observability: " << panel_exprs.size()
            << " panel expressions returned data, " << rule_exprs.size()
            << " alert expressions evaluated, " << gasloc_names
            << " gasloc_ series names scraped, in "
            << absl::FormatDuration(absl::Now() - test_start) << std::endl;

  {
    grpc::ClientContext context;
    v1::StopJobRequest request;
    request.set_job_id(job);
    v1::StopJobResponse response;
    EXPECT_TRUE(cluster.stub().StopJob(&context, request, &response).ok());
  }
  prometheus.Stop();
  cluster.StopAll();
}

}  // namespace
}  // namespace gasloc::testing
