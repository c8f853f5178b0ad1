// Text from the network made safe for a terminal (common/terminal_text.h).
#include "common/terminal_text.h"

#include "gasloc/v1/coordinator.pb.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

TEST(TerminalText, EscapesControlsKeepsText) {
  EXPECT_EQ(EscapeForTerminal("plain text, déjà vu"), "plain text, déjà vu");
  EXPECT_EQ(EscapeForTerminal("\x1b]0;pwned\x07\x1b[2J"),
            "\\x1b]0;pwned\\x07\\x1b[2J");
  EXPECT_EQ(EscapeForTerminal("a\nb\tc\rd\x7f"), "a\\nb\\tc\\rd\\x7f");
  EXPECT_EQ(EscapeForTerminal("csi \xc2\x9b" "2J"), "csi \\u009b2J");
  EXPECT_EQ(EscapeForTerminal("lone \x9b"), "lone \\x9b");
  // A backslash cannot forge an escape.
  EXPECT_EQ(EscapeForTerminal("\\x1b"), "\\\\x1b");
}

TEST(TerminalText, EveryStringFieldOfAResponse) {
  v1::ListJobsResponse response;
  v1::JobStatus* job = response.add_jobs();
  job->set_message("stopped: \x1b[31mred");
  job->mutable_spec()->set_name("n\x1b");
  job->add_failures()->set_error("e\x07");
  EscapeStringFields(&response);
  EXPECT_EQ(response.jobs(0).message(), "stopped: \\x1b[31mred");
  EXPECT_EQ(response.jobs(0).spec().name(), "n\\x1b");
  EXPECT_EQ(response.jobs(0).failures(0).error(), "e\\x07");
}

}  // namespace
}  // namespace gasloc
