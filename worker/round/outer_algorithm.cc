#include "worker/round/outer_algorithm.h"

namespace gasloc {

ExchangeOptions MakeExchangeOptions(const OuterContext& context) {
  const v1::ExchangeSpec& exchange = context.spec->exchange();
  ExchangeOptions options;
  options.encoding = exchange.encoding();
  options.chunk_bytes = exchange.chunk_bytes();
  options.deadline =
      context.clock->Now() + absl::Milliseconds(exchange.deadline_ms());
  return options;
}

}  // namespace gasloc
