// Fuzz target: the chunks a joining worker receives from FetchModel, as a
// broken or hostile member could send them. The input's first byte says
// whether the requester knows its own model size (bit 0); the rest is a
// list of blobs (FuzzInput format, fuzz_bytes.h), each a serialised
// v1::ExchangeChunk handed to ModelAssembler::Add until one is refused,
// then Finish. Properties, each a crash:
//   - a refused chunk or an incomplete model is an error, never a crash or
//     an allocation beyond the assembler's bound (ASan's malloc limit);
//   - a finished model has the announced size, within the bound and equal
//     to the requester's own size when it knows it; the outer state is
//     empty or the same size; the optimizer moments both or neither;
//   - every value of a finished model is finite, and it carries the job
//     and the sender of its first chunk.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_bytes.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_seeds.h"
#include "worker/exchange/model_fetch.h"

namespace gasloc::fuzz {
namespace {

void CheckFinite(const std::vector<float>& values, const char* part) {
  for (size_t i = 0; i < values.size(); ++i)
    GASLOC_FUZZ_CHECK(std::isfinite(values[i]),
                      absl::StrCat(part, " element ", i, " is not finite"));
}

void CheckModel(const FetchedModel& model, uint64_t announced,
                uint64_t first_sender, bool size_known) {
  const uint64_t n = model.params.size();
  GASLOC_FUZZ_CHECK(n == announced,
                    absl::StrCat(n, " params, announced ", announced));
  GASLOC_FUZZ_CHECK(n <= kFetchMaxElements, absl::StrCat(n, " params"));
  if (size_known)
    GASLOC_FUZZ_CHECK(n == kFetchElements, absl::StrCat(n, " params"));
  GASLOC_FUZZ_CHECK(model.outer_state.empty() || model.outer_state.size() == n,
                    absl::StrCat(model.outer_state.size(), " outer values"));
  GASLOC_FUZZ_CHECK(model.optimizer_m.size() == model.optimizer_v.size() &&
                        (model.optimizer_m.empty() ||
                         model.optimizer_m.size() == n),
                    absl::StrCat(model.optimizer_m.size(), " m, ",
                                 model.optimizer_v.size(), " v"));
  GASLOC_FUZZ_CHECK(model.job_id == kFetchJob, "job");
  GASLOC_FUZZ_CHECK(model.sender_id == first_sender, "sender");
  CheckFinite(model.params, "params");
  CheckFinite(model.outer_state, "outer state");
  CheckFinite(model.optimizer_m, "optimizer m");
  CheckFinite(model.optimizer_v, "optimizer v");
}

}  // namespace

// What ModelChunks sends for a snapshot: fp32 and bf16, with and without
// the optimizer moments, in chunks of 64 bytes (several per part).
void WriteSeeds(SeedWriter& seeds) {
  const std::vector<float> params = SourceArena(kFetchElements);
  std::vector<float> outer(kFetchElements), m(kFetchElements),
      v(kFetchElements);
  for (size_t i = 0; i < kFetchElements; ++i) {
    outer[i] = 0.125f * i;
    m[i] = -0.5f * i;
    v[i] = 0.25f * i;
  }
  for (bool optimizer : {false, true}) {
    for (v1::WireEncoding encoding :
         {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
      ModelSnapshot snapshot;
      snapshot.job_id = kFetchJob;
      snapshot.round = 6;
      snapshot.params = params;
      snapshot.outer_state = outer;
      if (optimizer) {
        snapshot.optimizer_m = m;
        snapshot.optimizer_v = v;
        snapshot.optimizer_step = 30;
      }
      FuzzOutput out;
      out.Put<uint8_t>(1);  // the requester knows its size
      const absl::Status status =
          ModelChunks(snapshot, kFetchSender, encoding, 64,
                      [&](const v1::ExchangeChunk& chunk) {
                        out.PutBlob(chunk.SerializeAsString());
                        return true;
                      });
      GASLOC_FUZZ_CHECK(status.ok(), status.ToString());
      seeds.Add(absl::StrCat(EncodingName(encoding),
                             optimizer ? "_with_optimizer" : "_model_only"),
                out.bytes());
    }
  }
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gasloc;
  fuzz::FuzzInput in(data, size);
  const bool size_known = in.TakeBool();
  ModelAssembler assembler(fuzz::kFetchJob, fuzz::kFetchRequester,
                           fuzz::kFetchMaxElements,
                           size_known ? fuzz::kFetchElements : 0);
  uint64_t announced = 0, first_sender = 0;
  bool first = true;
  for (int chunks = 0; !in.empty() && chunks < 512; ++chunks) {
    v1::ExchangeChunk chunk;
    const std::string_view blob = in.TakeBlob(1 << 16);
    if (!chunk.ParseFromArray(blob.data(), static_cast<int>(blob.size())))
      break;
    if (first) {
      announced = chunk.header().arena_elements();
      first_sender = chunk.header().sender_id();
      first = false;
    }
    if (!assembler.Add(chunk).ok()) return 0;
  }
  absl::StatusOr<FetchedModel> model = assembler.Finish();
  if (model.ok())
    fuzz::CheckModel(*model, announced, first_sender, size_known);
  return 0;
}
