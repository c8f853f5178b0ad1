// FetchModel's payload, without the network: a member turns a snapshot of
// its model (theta, the outer state, and its inner AdamW moments) into
// chunks (ModelChunks), and a joining worker checks and reassembles them
// (ModelAssembler). Both halves use the exchange chunk format: phase MODEL,
// OUTER_STATE, then optionally OPTIMIZER_M and OPTIMIZER_V (both or
// neither; their header `step` is the AdamW step count), each over the
// range [0, elements), in order, the last chunk of each flagged.
//
// Thread safety: ModelChunks is a pure function; a ModelAssembler is used
// by one thread.
#ifndef GASLOC_WORKER_EXCHANGE_MODEL_FETCH_H_
#define GASLOC_WORKER_EXCHANGE_MODEL_FETCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gasloc/v1/job.pb.h"
#include "gasloc/v1/peer.pb.h"

namespace gasloc {

// What a member serves: its current parameters and outer state (the same
// arena layout; outer_state may be empty when the algorithm keeps none).
// The spans stay valid while `keep_alive` (if set) is held.
struct ModelSnapshot {
  uint64_t job_id = 0;
  uint64_t round = 0;
  std::span<const float> params;
  std::span<const float> outer_state;
  // The inner AdamW moments (both empty = none to share) and step count.
  std::span<const float> optimizer_m;
  std::span<const float> optimizer_v;
  uint64_t optimizer_step = 0;
  std::shared_ptr<const void> keep_alive;
};

// Installed by the worker daemon: the snapshot of `job_id`, or
// FAILED_PRECONDITION if it holds no model of that job.
using ModelProvider =
    std::function<absl::StatusOr<ModelSnapshot>(uint64_t job_id)>;

// Encodes `snapshot` as chunks and hands each to `write` (which returns
// false to stop: the receiver went away; then CANCELLED is returned).
// INT8 is refused (INVALID_ARGUMENT): a model travels losslessly (FP32)
// or in BF16, never at 8 bits.
absl::Status ModelChunks(
    const ModelSnapshot& snapshot, uint64_t sender_id,
    v1::WireEncoding encoding, uint32_t chunk_bytes,
    const std::function<bool(const v1::ExchangeChunk&)>& write);

struct FetchedModel {
  uint64_t job_id = 0;
  uint64_t round = 0;
  uint64_t sender_id = 0;
  std::vector<float> params;
  std::vector<float> outer_state;
  // Empty when the member sent no optimizer state.
  std::vector<float> optimizer_m;
  std::vector<float> optimizer_v;
  uint64_t optimizer_step = 0;
};

class ModelAssembler {
 public:
  // `max_elements` bounds the arena size a sender may announce;
  // `expected_elements` (0 = unknown) is the requester's own model size,
  // which the announced size must equal: both are checked before anything
  // is allocated.
  ModelAssembler(uint64_t job_id, uint64_t requester_id,
                 uint64_t max_elements = uint64_t{1} << 32,
                 uint64_t expected_elements = 0);

  // Checks one chunk (job, phase order, sender and round consistent with
  // the first chunk, geometry, checksum, finite values, contiguous order)
  // and stores it.
  absl::Status Add(const v1::ExchangeChunk& chunk);
  // The model, once MODEL and OUTER_STATE (and, if started, both optimizer
  // parts) arrived complete; otherwise UNAVAILABLE naming what is missing.
  absl::StatusOr<FetchedModel> Finish();

 private:
  absl::Status Start(const v1::ChunkHeader& h);
  std::vector<float>& Target();

  const uint64_t requester_id_;
  const uint64_t max_elements_;
  const uint64_t expected_elements_;
  FetchedModel model_;
  int part_ = -1;               // index into the part order; -1 = none yet
  bool part_complete_ = false;  // the current part's last chunk arrived
  uint32_t part_step_ = 0;      // header step of the current part
  uint64_t next_ = 0;           // next element of the current part
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_MODEL_FETCH_H_
