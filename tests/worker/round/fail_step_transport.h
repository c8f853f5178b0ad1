// A PeerTransport for tests that reports the receive of one (round, phase,
// step) as failed (DATA_LOSS "injected") after it really ran: with the last
// all-gather step of a ring, the member alone sees its all-reduce fail
// while every other member completes the ring.
//
// Thread safety: as the wrapped transport.
#ifndef GASLOC_TESTS_WORKER_ROUND_FAIL_STEP_TRANSPORT_H_
#define GASLOC_TESTS_WORKER_ROUND_FAIL_STEP_TRANSPORT_H_

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/exchange/peer_transport.h"

namespace gasloc::testing {

template <typename Inner>
class FailStepTransport final : public PeerTransport {
 public:
  FailStepTransport(std::unique_ptr<Inner> inner, TransferKey fail)
      : inner_(std::move(inner)), fail_(fail) {}
  uint64_t self_id() const override { return inner_->self_id(); }
  std::vector<TransferOutcome> Exchange(
      const TransferKey& key, std::span<const OutgoingTransfer> sends,
      std::span<const IncomingTransfer> receives,
      const ExchangeOptions& options) override {
    std::vector<TransferOutcome> outcomes =
        inner_->Exchange(key, sends, receives, options);
    if (key.job_id == fail_.job_id && key.round == fail_.round &&
        key.phase == fail_.phase && key.step == fail_.step)
      for (TransferOutcome& o : outcomes)
        if (o.incoming) o.status = absl::DataLossError("injected");
    return outcomes;
  }
  Inner& inner() { return *inner_; }

 private:
  std::unique_ptr<Inner> inner_;
  TransferKey fail_;
};

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_ROUND_FAIL_STEP_TRANSPORT_H_
