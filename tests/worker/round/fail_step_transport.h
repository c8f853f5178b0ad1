// A PeerTransport for tests that reports the receives of one (or several)
// (round, phase, step) as failed (DATA_LOSS "injected") after it really ran: with the last
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
      : inner_(std::move(inner)), fail_{fail} {}
  // Fails the receives of each of `fail`.
  FailStepTransport(std::unique_ptr<Inner> inner, std::vector<TransferKey> fail)
      : inner_(std::move(inner)), fail_(std::move(fail)) {}
  uint64_t self_id() const override { return inner_->self_id(); }
  std::vector<TransferOutcome> Exchange(
      const TransferKey& key, std::span<const OutgoingTransfer> sends,
      std::span<const IncomingTransfer> receives,
      const ExchangeOptions& options) override {
    std::vector<TransferOutcome> outcomes =
        inner_->Exchange(key, sends, receives, options);
    for (const TransferKey& fail : fail_)
      if (key.job_id == fail.job_id && key.round == fail.round &&
          key.phase == fail.phase && key.step == fail.step)
        for (TransferOutcome& o : outcomes)
          if (o.incoming) o.status = absl::DataLossError("injected");
    return outcomes;
  }
  Inner& inner() { return *inner_; }

 private:
  std::unique_ptr<Inner> inner_;
  std::vector<TransferKey> fail_;
};

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_ROUND_FAIL_STEP_TRANSPORT_H_
