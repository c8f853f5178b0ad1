// Fuzz target: a job description as an operator (or anyone holding the
// operator role) sends it: text in JSON or protobuf text format through
// ParseJobSpec, then ApplyJobSpecDefaults, ValidateJobSpec and the memory
// estimate the coordinator and the workers check before allocating.
// Properties, each a crash:
//   - a refused spec is INVALID_ARGUMENT and its message starts with a
//     field path of JobSpec ("outer.alpha must be ...");
//   - a valid spec stays valid with defaults applied, and applying the
//     defaults twice changes nothing;
//   - a valid spec survives a text-format and a JSON round trip through
//     ParseJobSpec unchanged;
//   - the memory estimate and the fit check never crash.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/job_size.h"
#include "common/job_spec.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_seeds.h"

namespace gasloc::fuzz {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::util::MessageDifferencer;

// True if `path` ("outer.alpha") names a field of JobSpec.
bool IsFieldPath(absl::string_view path) {
  const Descriptor* message = v1::JobSpec::descriptor();
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (message == nullptr) return false;
    const FieldDescriptor* field =
        message->FindFieldByName(std::string(parts[i]));
    if (field == nullptr) return false;
    message = field->message_type();
  }
  return true;
}

void CheckRefusal(const absl::Status& status) {
  GASLOC_FUZZ_CHECK(absl::IsInvalidArgument(status), status.ToString());
  const absl::string_view message = status.message();
  const absl::string_view first = message.substr(0, message.find(' '));
  GASLOC_FUZZ_CHECK(IsFieldPath(first),
                    "the message does not start with a field path: " +
                        status.ToString());
}

void CheckRoundTrip(const v1::JobSpec& spec) {
  std::string text;
  GASLOC_FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(spec, &text),
                    "text format");
  absl::StatusOr<v1::JobSpec> from_text = ParseJobSpec(text);
  GASLOC_FUZZ_CHECK(from_text.ok(), from_text.status().ToString() + "\n" + text);
  GASLOC_FUZZ_CHECK(MessageDifferencer::Equals(*from_text, spec),
                    "text round trip changed the spec:\n" + text);
  std::string json;
  GASLOC_FUZZ_CHECK(
      google::protobuf::util::MessageToJsonString(spec, &json).ok(), "json");
  absl::StatusOr<v1::JobSpec> from_json = ParseJobSpec(json);
  GASLOC_FUZZ_CHECK(from_json.ok(), from_json.status().ToString() + "\n" + json);
  GASLOC_FUZZ_CHECK(MessageDifferencer::Equals(*from_json, spec),
                    "JSON round trip changed the spec:\n" + json);
}

}  // namespace

// The JSON that scripts/local_cluster.sh writes, its text-format twin, a
// spec with every default filled in (both formats), and refusals.
void WriteSeeds(SeedWriter& seeds) {
  seeds.Add("local_cluster.json", R"({
  "name": "local-gasloc",
  "model": {"layers": 2, "dModel": 64, "heads": 2, "context": 64},
  "training": {"batch": 8, "seed": "3",
               "adamw": {"lr": 0.003, "warmupSteps": 20}},
  "data": {"corpusPath": "/usr/share/common-licenses", "evalWindows": 16,
           "evalIntervalRounds": 5},
  "outer": {"algorithm": "ALGORITHM_GASLOC", "localSteps": 25},
  "exchange": {"deadlineMs": 20000},
  "checkpoint": {"directory": "/var/lib/gasloc/checkpoints", "intervalRounds": 10},
  "stop": {"maxRounds": "30"},
  "minWorkers": 4
})");
  seeds.Add("local_cluster.textproto", R"(name: "local-diloco"
model { layers: 2 d_model: 64 heads: 2 context: 64 }
training { batch: 8 seed: 3 adamw { lr: 0.003 warmup_steps: 20 } }
data { corpus_path: "/usr/share/common-licenses" }
outer { algorithm: ALGORITHM_DILOCO local_steps: 50 }
stop { max_rounds: 30 }
min_workers: 2
)");
  v1::JobSpec spec;
  spec.set_name("defaults");
  spec.mutable_data()->set_corpus_path("/usr/share/common-licenses");
  const v1::JobSpec filled = ApplyJobSpecDefaults(spec);
  std::string text, json;
  google::protobuf::TextFormat::PrintToString(filled, &text);
  (void)google::protobuf::util::MessageToJsonString(filled, &json);
  seeds.Add("defaults.textproto", text);
  seeds.Add("defaults.json", json);
  seeds.Add("too_big.textproto",
            "name: \"big\" model { layers: 256 d_model: 8192 }\n"
            "data { corpus_path: \"/etc/shadow\" }\n");
  seeds.Add("unknown_field.json", R"({"name": "x", "bogus": 1})");
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gasloc;
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) {
    GASLOC_FUZZ_CHECK(absl::IsInvalidArgument(spec.status()),
                      spec.status().ToString());
    return 0;
  }
  const absl::Status valid = ValidateJobSpec(*spec);
  v1::WorkerInfo small;
  small.set_memory_bytes(uint64_t{1} << 30);
  small.set_cores(2);
  (void)CheckJobFitsWorker(*spec, small);
  (void)EstimateJobMemoryBytes(*spec);
  if (!valid.ok()) {
    fuzz::CheckRefusal(valid);
    return 0;
  }
  const v1::JobSpec filled = ApplyJobSpecDefaults(*spec);
  const absl::Status still_valid = ValidateJobSpec(filled);
  GASLOC_FUZZ_CHECK(still_valid.ok(),
                    "valid, then refused with defaults applied: " +
                        still_valid.ToString());
  GASLOC_FUZZ_CHECK(
      google::protobuf::util::MessageDifferencer::Equals(
          ApplyJobSpecDefaults(filled), filled),
      "applying the defaults twice changed the spec");
  (void)EstimateJobMemoryBytes(filled);
  (void)CheckJobFitsWorker(filled, small);
  fuzz::CheckRoundTrip(*spec);
  return 0;
}
