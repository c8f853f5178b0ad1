// What the fuzz targets and their seed generator (make_fuzz_seeds.cc) must
// agree on: the receiver's fixed expectations, the sender's source arena,
// the checkpoint layout. A seed built from these reaches the code behind
// the first checks (a valid chunk decodes, a valid checkpoint loads), so
// the fuzzer mutates from there.
//
// Thread safety: constants and pure functions.
#ifndef GASLOC_TESTS_FUZZ_FUZZ_FIXTURES_H_
#define GASLOC_TESTS_FUZZ_FUZZ_FIXTURES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/arena.h"
#include "worker/exchange/wire_codec.h"
#include "worker/model/model.h"

namespace gasloc::fuzz {

// --- chunk_decode_fuzzer -------------------------------------------------
inline constexpr uint64_t kChunkArena = 96;
inline ChunkExpectation ChunkTargetExpectation() {
  ChunkExpectation expect;
  expect.key = {.job_id = 3, .round = 5, .phase = v1::EXCHANGE_PHASE_GOSSIP,
                .step = 0};
  expect.sender_id = 7;
  expect.receiver_id = 1;
  expect.range_begin = 8;
  expect.range_end = 72;
  expect.arena_elements = kChunkArena;
  return expect;
}

// A sender's arena: 0.5 i - 3, exact in fp32 and in bf16 (so a committed
// receive equals the source whatever the encoding).
inline std::vector<float> SourceArena(size_t elements) {
  std::vector<float> values(elements);
  for (size_t i = 0; i < elements; ++i) values[i] = 0.5f * i - 3.0f;
  return values;
}

// --- mailbox_fuzzer ------------------------------------------------------
inline constexpr uint64_t kMailboxSelf = 1;
inline constexpr uint64_t kMailboxArena = 64;
inline constexpr uint64_t kMailboxJob = 4;

// --- model_fetch_fuzzer --------------------------------------------------
inline constexpr uint64_t kFetchJob = 9;
inline constexpr uint64_t kFetchRequester = 2;
inline constexpr uint64_t kFetchSender = 5;
inline constexpr uint64_t kFetchElements = 40;
// The most elements the fuzzed assembler lets a sender announce.
inline constexpr uint64_t kFetchMaxElements = 4096;

// --- checkpoint_fuzzer ---------------------------------------------------
inline ModelConfig CheckpointConfig() {
  return {.layers = 1, .d_model = 4, .heads = 1, .context = 4};
}
inline std::shared_ptr<const ArenaLayout> CheckpointLayout() {
  return std::make_shared<ArenaLayout>(std::vector<TensorSpec>{
      {"w", {4, 3}, true}, {"b", {3}, false}});
}
// Offsets in the checkpoint header (docs/training.md, "Checkpoint
// format"): the file's total length; the trailer is a CRC-32C of every
// byte before it.
inline constexpr size_t kCheckpointLengthOffset = 16;
inline constexpr size_t kCheckpointHeaderBytes = 88;

}  // namespace gasloc::fuzz

#endif  // GASLOC_TESTS_FUZZ_FUZZ_FIXTURES_H_
