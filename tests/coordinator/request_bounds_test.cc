// The Coordinator service's request bounds (coordinator/request_bounds.h):
// every string and repeated field has a length limit, every number a worker
// reports a range, and each refusal names the field.
#include "coordinator/request_bounds.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

using ::testing::HasSubstr;

void ExpectRefused(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(field));
}

TEST(RequestBounds, RegisterWorkerStrings) {
  v1::RegisterWorkerRequest request;
  request.mutable_info()->set_address("10.0.0.1:7000");
  request.mutable_info()->set_hostname("host");
  EXPECT_TRUE(CheckRequestBounds(request).ok());
  request.mutable_info()->set_address(std::string(5 << 20, 'a'));
  ExpectRefused(CheckRequestBounds(request), "info.address");
  request.mutable_info()->set_address("10.0.0.1:7000");
  request.mutable_info()->set_hostname(std::string(300, 'h'));
  ExpectRefused(CheckRequestBounds(request), "info.hostname");
  request.mutable_info()->set_hostname("host");
  request.mutable_info()->set_software_version(std::string(200, 'v'));
  ExpectRefused(CheckRequestBounds(request), "info.software_version");
  request.mutable_info()->set_software_version("1");
  request.mutable_info()->set_metrics_port(70000);
  ExpectRefused(CheckRequestBounds(request), "info.metrics_port");
}

TEST(RequestBounds, ReasonsAndProgress) {
  v1::LeaveWorkerRequest leave;
  leave.set_reason(std::string(kMaxReasonBytes + 1, 'r'));
  ExpectRefused(CheckRequestBounds(leave), "reason");
  v1::StopJobRequest stop;
  stop.set_reason(std::string(kMaxReasonBytes, 'r'));
  EXPECT_TRUE(CheckRequestBounds(stop).ok());
  // The coordinator fuzzer's finding: a resume reason that is not UTF-8
  // went into the job's message and events, which then could not be sent.
  v1::ResumeJobRequest resume;
  resume.set_reason("try\xe3" "again");
  ExpectRefused(CheckRequestBounds(resume), "reason is not UTF-8");
  resume.set_reason(std::string(kMaxReasonBytes + 1, 'r'));
  ExpectRefused(CheckRequestBounds(resume), "reason");
  resume.set_reason("resumed by the operator");
  EXPECT_TRUE(CheckRequestBounds(resume).ok());
  v1::HeartbeatRequest beat;
  beat.mutable_progress()->set_train_loss(
      std::numeric_limits<float>::infinity());
  ExpectRefused(CheckRequestBounds(beat), "progress.train_loss");
  beat.mutable_progress()->set_train_loss(3.0f);
  beat.mutable_progress()->set_tokens(~uint64_t{0});
  ExpectRefused(CheckRequestBounds(beat), "progress.tokens");
}

TEST(RequestBounds, ReportRoundNumbers) {
  v1::ReportRoundRequest report;
  report.set_inner_steps(100);
  report.set_compute_seconds(2.5);
  report.set_tokens(100 * 16 * 256);
  report.set_train_loss(2.0f);
  EXPECT_TRUE(CheckRequestBounds(report).ok());

  v1::ReportRoundRequest bad = report;
  bad.set_compute_seconds(5e-324);  // an infinite step rate
  ExpectRefused(CheckRequestBounds(bad), "compute_seconds");
  bad = report;
  bad.set_compute_seconds(std::numeric_limits<double>::quiet_NaN());
  ExpectRefused(CheckRequestBounds(bad), "compute_seconds");
  bad = report;
  bad.set_tokens(~uint64_t{0} - 5);  // would wrap the job's total
  ExpectRefused(CheckRequestBounds(bad), "tokens");
  bad = report;
  bad.set_train_loss(std::numeric_limits<float>::quiet_NaN());
  ExpectRefused(CheckRequestBounds(bad), "train_loss");
  bad = report;
  bad.set_val_bpb(-1.0f);
  ExpectRefused(CheckRequestBounds(bad), "val_bpb");
  bad = report;
  bad.set_exchange_seconds(-3);
  ExpectRefused(CheckRequestBounds(bad), "exchange_seconds");
  bad = report;
  bad.set_error(std::string(5 << 20, 'e'));
  ExpectRefused(CheckRequestBounds(bad), "error");
  bad = report;
  for (int i = 0; i <= kMaxFailedPeers; ++i) bad.add_failed_peers(i);
  ExpectRefused(CheckRequestBounds(bad), "failed_peers");
  // The overlapped steps and seconds are a part of the round's.
  report.set_overlap_steps(40);
  report.set_overlap_compute_seconds(1.5);
  report.set_round_seconds(3.0);
  EXPECT_TRUE(CheckRequestBounds(report).ok());
  bad = report;
  bad.set_overlap_steps(101);
  ExpectRefused(CheckRequestBounds(bad), "overlap_steps");
  bad = report;
  bad.set_overlap_compute_seconds(2.6);
  ExpectRefused(CheckRequestBounds(bad), "overlap_compute_seconds");
  bad = report;
  bad.set_round_seconds(std::numeric_limits<double>::infinity());
  ExpectRefused(CheckRequestBounds(bad), "round_seconds");
  // A failed round's loss is whatever the worker had: not checked.
  bad = report;
  bad.set_outcome(v1::ROUND_OUTCOME_FAILED);
  bad.set_train_loss(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(CheckRequestBounds(bad).ok());
}

TEST(RequestBounds, SaturatingAdd) {
  EXPECT_EQ(SaturatingAdd(1, 2), 3u);
  EXPECT_EQ(SaturatingAdd(~uint64_t{0} - 1, 5), ~uint64_t{0});
}

}  // namespace
}  // namespace gasloc::coordinator
