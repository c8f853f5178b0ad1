// A job's event log: sequence numbers, the window kept, reading after a
// sequence number, and dropping a rolled-back call's events.
#include "coordinator/job_events.h"

#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::JobEvent Event(const char* text) {
  v1::JobStatus st;
  st.set_job_id(3);
  return MakeJobEvent(v1::JOB_EVENT_KIND_ROUND, text, st, kT0);
}

TEST(JobEventsTest, MakeJobEventCarriesTheStatus) {
  const v1::JobEvent e = Event("round 0 completed");
  EXPECT_EQ(e.kind(), v1::JOB_EVENT_KIND_ROUND);
  EXPECT_EQ(e.job().job_id(), 3u);
  EXPECT_EQ(e.unix_ms(), absl::ToUnixMillis(kT0));
  EXPECT_EQ(e.description(), "round 0 completed");
}

TEST(JobEventsTest, AfterReturnsNewerEventsAndTheLastSeq) {
  JobEventLog log;
  log.Append(4, Event("a"), 10);
  log.Append(7, Event("b"), 10);
  JobEvents all = log.After(0);
  ASSERT_EQ(all.events.size(), 2u);
  EXPECT_EQ(all.next_seq, 7u);
  JobEvents newer = log.After(4);
  ASSERT_EQ(newer.events.size(), 1u);
  EXPECT_EQ(newer.events[0].description(), "b");
  JobEvents none = log.After(7);
  EXPECT_TRUE(none.events.empty());
  EXPECT_EQ(none.next_seq, 7u);
}

TEST(JobEventsTest, KeepsTheNewest) {
  JobEventLog log;
  for (uint64_t seq = 1; seq <= 5; ++seq) log.Append(seq, Event("e"), 3);
  JobEvents kept = log.After(0);
  EXPECT_EQ(kept.events.size(), 3u);
  EXPECT_EQ(kept.next_seq, 5u);
}

TEST(JobEventsTest, DropAfterForgetsARolledBackCall) {
  JobEventLog log;
  log.Append(1, Event("committed"), 10);
  log.Append(2, Event("rolled back"), 10);
  log.Append(3, Event("rolled back too"), 10);
  log.DropAfter(1);
  JobEvents left = log.After(0);
  ASSERT_EQ(left.events.size(), 1u);
  EXPECT_EQ(left.events[0].description(), "committed");
}

}  // namespace
}  // namespace gasloc::coordinator
