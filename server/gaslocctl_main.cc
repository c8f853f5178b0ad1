// gaslocctl: command-line client of the coordinator.
//
//   gaslocctl [--coordinator=HOST:PORT] [--output=table|json] COMMAND
//
// Exit codes: 0 ok; 1 the command failed (coordinator unreachable, job not
// found, invalid spec, a watched job that failed or was stopped), with one
// line "gaslocctl: <reason>" on stderr; 2 bad usage.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_setup.h"
#include "common/job_spec.h"
#include "common/json_string.h"
#include "common/link_bandwidth.h"
#include "common/terminal_text.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "server/credentials.h"
#include "server/job_export_client.h"

ABSL_FLAG(std::string, coordinator, "localhost:7070",
          "Coordinator address (host:port).");
ABSL_FLAG(std::string, output, "table", "Output format: table or json.");
ABSL_FLAG(int, timeout_ms, 10000,
          "Deadline of each call in milliseconds (job watch: of connecting).");
ABSL_FLAG(bool, all, false, "workers: include dead and departed workers.");
ABSL_FLAG(std::string, reason, "",
          "job stop / job resume: the reason recorded with the job (default "
          "'gaslocctl job stop' / 'gaslocctl job resume').");
ABSL_FLAG(std::string, out, "", "job export: the directory to write.");
ABSL_FLAG(std::string, dtype, "fp32",
          "job export: fp32 or bf16, the dtype of model.safetensors.");
ABSL_FLAG(uint64_t, worker, 0,
          "job export: the member whose model to take (0 = the first that "
          "serves it).");
ABSL_FLAG(bool, average, false,
          "job export: the mean of every member's model (GASLoC, D-PSGD).");
ABSL_FLAG(absl::Duration, export_timeout, absl::Minutes(30),
          "job export: the whole transfer's deadline.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM root of the coordinator's certificate (enables TLS).");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, token_file, "",
          "File whose first token is sent as the operator's bearer token.");
ABSL_FLAG(bool, insecure, false,
          "Talk to a coordinator started with --insecure (plaintext, no "
          "credentials).");

namespace gasloc::ctl {
namespace {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

int Fail(const std::string& message) {
  // Errors may quote what a caller sent (a job name, a path): escaped.
  std::fprintf(stderr, "gaslocctl: %s\n", EscapeForTerminal(message).c_str());
  return kFailed;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "gaslocctl: %s (see gaslocctl --help)\n",
               message.c_str());
  return kUsage;
}

bool Json() { return absl::GetFlag(FLAGS_output) == "json"; }

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok())
    return "{}";
  return out;
}

// One line naming what went wrong; UNAVAILABLE names the address.
std::string Describe(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    return absl::StrCat("coordinator ", absl::GetFlag(FLAGS_coordinator),
                        " unreachable: ", status.error_message());
  std::string message = status.error_message();
  for (char& c : message)
    if (c == '\n') c = ' ';
  return message;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)));
  return context;
}

std::string FormatCount(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

std::string FormatEta(double seconds) {
  if (seconds < 0) return "?";
  return absl::FormatDuration(absl::Seconds(std::round(seconds)));
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr absl::string_view kPrefix = "JOB_STATE_";
  if (absl::string_view(name).substr(0, kPrefix.size()) == kPrefix)
    name = name.substr(kPrefix.size());
  return name;
}

std::string RoundText(const v1::JobStatus& job) {
  const uint64_t max_rounds = job.spec().stop().max_rounds();
  return max_rounds > 0 ? absl::StrCat(job.rounds_completed(), "/", max_rounds)
                        : absl::StrCat(job.rounds_completed());
}

std::string LossText(float v) {
  return v > 0 ? absl::StrFormat("%.4f", v) : std::string("-");
}

// Prints rows as left-aligned columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

void PrintJobs(const std::vector<const v1::JobStatus*>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "ROUND", "TOKENS", "LOSS", "VAL_BPB", "WORKERS",
       "ETA", "MESSAGE"}};
  for (const v1::JobStatus* job : jobs) {
    rows.push_back({absl::StrCat(job->job_id()), job->spec().name(),
                    StateName(job->state()), RoundText(*job),
                    FormatCount(static_cast<double>(job->tokens())),
                    LossText(job->train_loss()), LossText(job->val_bpb()),
                    absl::StrCat(job->worker_ids_size()),
                    FormatEta(job->eta_seconds()), job->message()});
  }
  PrintTable(rows);
}

// The job's latest complete checkpoint set: what a resume starts from.
std::string CheckpointSetText(const v1::JobStatus& job) {
  if (!job.has_checkpoint_set()) return "- (none complete yet)";
  const v1::CheckpointSet& set = job.checkpoint_set();
  return absl::StrCat("round ", set.round(), " (workers ",
                      absl::StrJoin(set.worker_ids(), ","), ", val bpb ",
                      LossText(set.val_bpb()), ", at ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                       absl::FromUnixMillis(set.unix_ms()),
                                       absl::UTCTimeZone()),
                      ")");
}

void PrintJobDetail(const v1::JobStatus& job) {
  auto ms = [](int64_t t) {
    return t == 0 ? std::string("-")
                  : absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                     absl::FromUnixMillis(t), absl::UTCTimeZone());
  };
  const auto& outer = job.spec().outer();
  PrintTable({
      {"id:", absl::StrCat(job.job_id())},
      {"name:", job.spec().name()},
      {"state:", StateName(job.state())},
      {"message:", job.message()},
      {"algorithm:", absl::StrCat(v1::Algorithm_Name(outer.algorithm()), ", ",
                                  v1::Topology_Name(outer.topology()), ", ",
                                  v1::BudgetPolicy_Name(outer.budget_policy()),
                                  ", H=", outer.local_steps())},
      {"rounds:", absl::StrCat(RoundText(job), " completed, ",
                               job.round_planned(), " highest planned")},
      {"epoch:", absl::StrCat(job.epoch())},
      {"workers:", absl::StrJoin(job.worker_ids(), ",")},
      {"tokens:", absl::StrCat(job.tokens())},
      {"train loss:", LossText(job.train_loss())},
      {"val bpb:", LossText(job.val_bpb())},
      {"created:", ms(job.created_unix_ms())},
      {"started:", ms(job.started_unix_ms())},
      {"ended:", ms(job.ended_unix_ms())},
      {"eta:", FormatEta(job.eta_seconds())},
      {"checkpoint set:", CheckpointSetText(job)},
  });
  if (job.failures_size() > 0) {
    std::printf("worker failures (newest last):\n");
    std::vector<std::vector<std::string>> rows = {
        {"  ROUND", "WORKER", "WHAT", "ERROR"}};
    for (const auto& f : job.failures())
      rows.push_back({absl::StrCat("  ", f.round()), absl::StrCat(f.worker_id()),
                      f.outcome() == v1::ROUND_OUTCOME_SETUP_FAILED
                          ? "set-up"
                          : "round",
                      f.error()});
    PrintTable(rows);
  }
  if (job.budget_changes_size() > 0) {
    std::printf("budget changes (newest last):\n");
    std::vector<std::vector<std::string>> rows = {
        {"  ROUND", "WORKER", "H", "REASON"}};
    for (const auto& c : job.budget_changes())
      rows.push_back({absl::StrCat("  ", c.round()), absl::StrCat(c.worker_id()),
                      absl::StrCat(c.old_local_steps(), "->", c.new_local_steps()),
                      c.reason()});
    PrintTable(rows);
  }
}

absl::StatusOr<uint64_t> ParseId(const std::string& text) {
  uint64_t id;
  if (!absl::SimpleAtoi(text, &id) || id == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("job id must be a positive integer, got '", text, "'"));
  return id;
}

int JobStart(v1::Coordinator::Stub& stub, const std::string& path) {
  std::string text;
  if (path == "-") {
    std::stringstream buffer;
    buffer << std::cin.rdbuf();
    text = buffer.str();
  } else {
    std::ifstream in(path);
    if (!in) return Fail(absl::StrCat("cannot read spec file '", path, "'"));
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  auto spec = ParseJobSpec(text);
  if (!spec.ok()) return Fail(absl::StrCat("invalid spec: ", spec.status().message()));
  if (auto valid = ValidateJobSpec(*spec); !valid.ok())
    return Fail(absl::StrCat("invalid spec: ", valid.message()));
  v1::StartJobRequest request;
  *request.mutable_spec() = *spec;
  v1::StartJobResponse response;
  grpc::Status status = stub.StartJob(Context().get(), request, &response);
  if (!status.ok()) return Fail(Describe(status));
  EscapeStringFields(&response);
  if (Json()) {
    std::printf("%s\n", ToJson(response.job()).c_str());
  } else {
    std::printf("job %llu (%s) started: %s\n",
                static_cast<unsigned long long>(response.job().job_id()),
                response.job().spec().name().c_str(),
                StateName(response.job().state()).c_str());
  }
  return kOk;
}

int JobList(v1::Coordinator::Stub& stub) {
  v1::ListJobsResponse response;
  grpc::Status status = stub.ListJobs(Context().get(), {}, &response);
  if (!status.ok()) return Fail(Describe(status));
  EscapeStringFields(&response);
  if (Json()) {
    std::printf("%s\n", ToJson(response).c_str());
    return kOk;
  }
  std::vector<const v1::JobStatus*> jobs;
  for (const auto& job : response.jobs()) jobs.push_back(&job);
  PrintJobs(jobs);
  return kOk;
}

// GetJob of `id` into *response.
grpc::Status FetchJob(v1::Coordinator::Stub& stub, uint64_t id,
                      v1::GetJobResponse* response) {
  v1::GetJobRequest request;
  request.set_job_id(id);
  return stub.GetJob(Context().get(), request, response);
}

int JobGet(v1::Coordinator::Stub& stub, uint64_t id) {
  v1::GetJobResponse response;
  grpc::Status status = FetchJob(stub, id, &response);
  if (!status.ok()) return Fail(Describe(status));
  EscapeStringFields(&response);
  if (Json()) {
    std::printf("%s\n", ToJson(response.job()).c_str());
  } else {
    PrintJobDetail(response.job());
  }
  return kOk;
}

// `job budgets ID`: every member's H_i in the latest planned round, the
// inputs of the formula (algorithms.md section 5), its waiting and why.
int JobBudgets(v1::Coordinator::Stub& stub, uint64_t id) {
  v1::GetJobResponse response;
  grpc::Status status = FetchJob(stub, id, &response);
  if (!status.ok()) return Fail(Describe(status));
  EscapeStringFields(&response);
  const v1::JobStatus& job = response.job();
  if (Json()) {
    v1::JobStatus budgets;
    budgets.set_job_id(job.job_id());
    *budgets.mutable_worker_budgets() = job.worker_budgets();
    std::printf("%s\n", ToJson(budgets).c_str());
    return kOk;
  }
  if (job.worker_budgets().empty()) {
    std::printf("job %llu %s has no planned round to show (an ended job "
                "keeps none)\n",
                static_cast<unsigned long long>(id),
                StateName(job.state()).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"WORKER", "ROUND", "H_I", "PREV", "STEPS/S", "LINK_MB/S", "C_I_S",
       "BOUND_BY", "T_S", "WAIT", "REASON"}};
  for (const v1::WorkerBudget& b : job.worker_budgets())
    rows.push_back(
        {absl::StrCat(b.worker_id()), absl::StrCat(b.round()),
         absl::StrCat(b.local_steps()),
         b.previous_local_steps() == 0 ? "-"
                                       : absl::StrCat(b.previous_local_steps()),
         absl::StrFormat("%.2f", b.steps_per_second()),
         b.bytes_per_second() > 0
             ? absl::StrFormat("%.1f",
                               LinkMegabytesPerSecond(b.bytes_per_second()))
             : "-",
         absl::StrFormat("%.3g", b.exchange_seconds()),
         b.bound_peer() == 0 ? "-" : absl::StrCat(b.bound_peer()),
         absl::StrFormat("%.3g", b.target_seconds()),
         absl::StrFormat("%.0f%%", 100 * b.wait_fraction()), b.reason()});
  PrintTable(rows);
  return kOk;
}

std::string ReasonOr(const std::string& fallback) {
  const std::string reason = absl::GetFlag(FLAGS_reason);
  return reason.empty() ? fallback : reason;
}

// Prints the outcome of a call that changed job `id`'s state (stop,
// resume): its new state and message, or the job as JSON.
int PrintStateChange(uint64_t id, const grpc::Status& status,
                     v1::JobStatus job) {
  if (!status.ok()) return Fail(Describe(status));
  EscapeStringFields(&job);
  if (Json()) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    std::printf("job %llu %s: %s\n", static_cast<unsigned long long>(id),
                StateName(job.state()).c_str(), job.message().c_str());
  }
  return kOk;
}

int JobStop(v1::Coordinator::Stub& stub, uint64_t id) {
  v1::StopJobRequest request;
  request.set_job_id(id);
  request.set_reason(ReasonOr("gaslocctl job stop"));
  v1::StopJobResponse response;
  grpc::Status status = stub.StopJob(Context().get(), request, &response);
  return PrintStateChange(id, status, response.job());
}

int JobResume(v1::Coordinator::Stub& stub, uint64_t id) {
  v1::ResumeJobRequest request;
  request.set_job_id(id);
  request.set_reason(ReasonOr("gaslocctl job resume"));
  v1::ResumeJobResponse response;
  grpc::Status status = stub.ResumeJob(Context().get(), request, &response);
  return PrintStateChange(id, status, response.job());
}

std::string ProgressLine(const v1::JobStatus& job) {
  return absl::StrFormat(
      "job %d %s  round %s  tokens %s  loss %s  val_bpb %s  workers %d  ETA %s",
      job.job_id(), StateName(job.state()), RoundText(job),
      FormatCount(static_cast<double>(job.tokens())), LossText(job.train_loss()),
      LossText(job.val_bpb()), job.worker_ids_size(),
      FormatEta(job.eta_seconds()));
}

int JobWatch(v1::Coordinator::Stub& stub, uint64_t id) {
  grpc::ClientContext context;
  v1::WatchJobRequest request;
  request.set_job_id(id);
  auto reader = stub.WatchJob(&context, request);
  const bool tty = isatty(STDOUT_FILENO) != 0 && !Json();
  v1::JobEvent event;
  v1::JobStatus last;
  bool any = false;
  while (reader->Read(&event)) {
    any = true;
    EscapeStringFields(&event);
    last = event.job();
    if (Json()) {
      std::printf("%s\n", ToJson(event).c_str());
    } else if (tty) {
      // One live line, redrawn; notable events get their own line above it.
      if (event.kind() != v1::JOB_EVENT_KIND_PROGRESS &&
          event.kind() != v1::JOB_EVENT_KIND_ROUND &&
          event.kind() != v1::JOB_EVENT_KIND_SNAPSHOT)
        std::printf("\r\033[K%s\n", event.description().c_str());
      std::printf("\r\033[K%s", ProgressLine(last).c_str());
    } else {
      std::printf("%s  (%s)\n", ProgressLine(last).c_str(),
                  event.description().c_str());
    }
    std::fflush(stdout);
  }
  grpc::Status status = reader->Finish();
  if (tty) std::printf("\n");
  if (!status.ok() && !any) return Fail(Describe(status));
  switch (last.state()) {
    case v1::JOB_STATE_FINISHED:
      return kOk;
    case v1::JOB_STATE_FAILED:
    case v1::JOB_STATE_STOPPED:
      return Fail(absl::StrCat("job ", id, " ", StateName(last.state()), ": ",
                               last.message()));
    default:
      return Fail(absl::StrCat("watch of job ", id, " ended early: ",
                               status.ok() ? "stream closed" : Describe(status)));
  }
}

int JobExport(v1::Coordinator::Stub& stub, uint64_t id) {
  JobExportOptions options;
  options.out_dir = absl::GetFlag(FLAGS_out);
  if (options.out_dir.empty()) return Usage("job export needs --out=DIR");
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "fp32" && dtype != "bf16")
    return Usage(absl::StrCat("--dtype must be fp32 or bf16, got '", dtype, "'"));
  options.dtype = dtype == "bf16" ? ExportDtype::kBF16 : ExportDtype::kF32;
  options.worker_id = absl::GetFlag(FLAGS_worker);
  options.average = absl::GetFlag(FLAGS_average);
  if (options.average && options.worker_id != 0)
    return Usage("--average and --worker exclude each other");
  options.timeout = absl::GetFlag(FLAGS_export_timeout);
  if (!Json())
    options.progress = [](const std::string& line) {
      std::fprintf(stderr, "gaslocctl: %s\n", line.c_str());
    };
  auto result = ExportJob(stub, id, options);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  const v1::JobStatus& job = result->job;
  if (Json()) {
    std::string out;  // the path as a JSON string literal
    AppendJsonString(options.out_dir, &out);
    std::printf(
        "{\"job_id\": %llu, \"state\": \"%s\", \"out\": %s, "
        "\"dtype\": \"%s\", \"worker_ids\": [%s], \"bytes\": %llu, "
        "\"val_bpb\": %.6f}\n",
        static_cast<unsigned long long>(id), StateName(job.state()).c_str(),
        out.c_str(), dtype.c_str(),
        absl::StrJoin(result->members, ", ").c_str(),
        static_cast<unsigned long long>(result->bytes_received), job.val_bpb());
    return kOk;
  }
  std::printf("exported job %llu (%s, %s rounds, val bpb %s) from worker%s %s "
              "-> %s/%s, %s/%s (%s)\n",
              static_cast<unsigned long long>(id),
              StateName(job.state()).c_str(), RoundText(job).c_str(),
              LossText(job.val_bpb()).c_str(),
              result->members.size() > 1 ? "s (mean of)" : "",
              absl::StrJoin(result->members, ",").c_str(),
              EscapeForTerminal(options.out_dir).c_str(), kExportWeightsFile,
              EscapeForTerminal(options.out_dir).c_str(), kExportConfigFile,
              dtype.c_str());
  return kOk;
}

int Workers(v1::Coordinator::Stub& stub) {
  v1::ListWorkersRequest request;
  request.set_include_gone(absl::GetFlag(FLAGS_all));
  v1::ListWorkersResponse response;
  grpc::Status status = stub.ListWorkers(Context().get(), request, &response);
  if (!status.ok()) return Fail(Describe(status));
  EscapeStringFields(&response);
  if (Json()) {
    std::printf("%s\n", ToJson(response).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "ADDRESS", "HOST", "CORES", "STATE", "JOB", "ROUND", "LOSS",
       "STEPS/S", "LINK_MB/S", "H_I", "HEARTBEAT", "VERSION"}};
  for (const auto& w : response.workers()) {
    std::string state = v1::WorkerState_Name(w.state());
    if (state.rfind("WORKER_STATE_", 0) == 0) state = state.substr(13);
    const auto& p = w.progress();
    rows.push_back({absl::StrCat(w.worker_id()), w.info().address(),
                    w.info().hostname().empty() ? "-" : w.info().hostname(),
                    absl::StrCat(w.info().cores()), state,
                    p.job_id() == 0 ? "-" : absl::StrCat(p.job_id()),
                    absl::StrCat(p.round()), LossText(p.train_loss()),
                    absl::StrFormat("%.2f", p.steps_per_second()),
                    absl::StrFormat("%.1f", LinkMegabytesPerSecond(
                                                p.link_bytes_per_second())),
                    w.local_steps() == 0 ? "-" : absl::StrCat(w.local_steps()),
                    absl::StrCat(w.heartbeat_age_ms(), "ms"),
                    w.info().software_version()});
  }
  PrintTable(rows);
  return kOk;
}

int Run(const std::vector<std::string>& args) {
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "table" && output != "json")
    return Usage(absl::StrCat("--output must be table or json, got '", output, "'"));
  if (args.size() < 2) return Usage("missing COMMAND");
  const CredentialsOptions credentials{
      .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
      .tls_key_file = absl::GetFlag(FLAGS_tls_key),
      .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
      .token_file = absl::GetFlag(FLAGS_token_file),
      .tokens_checked = false,
      .insecure = absl::GetFlag(FLAGS_insecure)};
  auto channel = MakeChannel(absl::GetFlag(FLAGS_coordinator), credentials);
  if (!channel.ok()) return Fail(std::string(channel.status().message()));
  auto stub = v1::Coordinator::NewStub(*channel);

  const std::string& command = args[1];
  if (command == "workers") {
    if (args.size() != 2) return Usage("workers takes no arguments");
    return Workers(*stub);
  }
  if (command != "job") return Usage(absl::StrCat("unknown command '", command, "'"));
  if (args.size() < 3)
    return Usage(
        "job needs a subcommand: start, list, get, status, budgets, watch, stop, "
        "resume, export");
  const std::string& sub = args[2];
  if (sub == "list") {
    if (args.size() != 3) return Usage("job list takes no arguments");
    return JobList(*stub);
  }
  if (args.size() != 4)
    return Usage(absl::StrCat("job ", sub, " needs exactly one argument"));
  if (sub == "start") return JobStart(*stub, args[3]);
  auto id = ParseId(args[3]);
  if (!id.ok()) return Usage(std::string(id.status().message()));
  if (sub == "get" || sub == "status") return JobGet(*stub, *id);
  if (sub == "budgets") return JobBudgets(*stub, *id);
  if (sub == "watch") return JobWatch(*stub, *id);
  if (sub == "stop") return JobStop(*stub, *id);
  if (sub == "resume") return JobResume(*stub, *id);
  if (sub == "export") return JobExport(*stub, *id);
  return Usage(absl::StrCat("unknown job subcommand '", sub, "'"));
}

}  // namespace
}  // namespace gasloc::ctl

int main(int argc, char** argv) {
  auto args = gasloc::ParseFlagsOrExit(
      argc, argv,
      "gaslocctl: control a gasloc coordinator.\n\n"
      "Usage: gaslocctl [--coordinator=HOST:PORT] [--output=table|json] "
      "COMMAND\n"
      "  job start SPEC   start a job (SPEC: JSON or text-format JobSpec file; "
      "- = stdin)\n"
      "  job list         list jobs\n"
      "  job get ID       show one job (its failures, its latest complete "
      "checkpoint set)\n"
      "  job status ID    the same as job get\n"
      "  job budgets ID   every member's H_i, s_i, b_i, c_i, wait and reason "
      "in the latest planned round\n"
      "  job watch ID     follow a job's progress until it ends (exit 0 when it "
      "finishes)\n"
      "  job stop ID      stop a job [--reason=TEXT]\n"
      "  job resume ID    a STOPPED or FAILED job runs again from its latest "
      "complete checkpoint set [--reason=TEXT]\n"
      "  job export ID    the job's model as DIR/model.safetensors + "
      "config.json, through the\n"
      "                   coordinator --out=DIR [--dtype=fp32|bf16] "
      "[--worker=ID | --average]\n"
      "  workers          list workers [--all: dead and departed too]\n"
      "Exit codes: 0 ok, 1 failed (one-line reason on stderr), 2 bad usage.");
  return gasloc::ctl::Run(args);
}
