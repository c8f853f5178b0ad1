// A Prometheus Collectable whose metric families are computed by a callback
// when /metrics is scraped. For values that are cheapest and most exact to
// derive from state on demand (ages, counts of things by state, one gauge
// per live worker) instead of being pushed on every change: nothing is kept
// between scrapes, so a worker that left simply stops appearing.
//
// Thread safety: Collect() runs on the exposer's HTTP threads at any time;
// the callback must be thread-safe (it usually takes its owner's lock for
// a moment).
#ifndef GASLOC_COMMON_SCRAPE_COLLECTABLE_H_
#define GASLOC_COMMON_SCRAPE_COLLECTABLE_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace gasloc {

class ScrapeCollectable : public prometheus::Collectable {
 public:
  using Callback = std::function<std::vector<prometheus::MetricFamily>()>;
  explicit ScrapeCollectable(Callback callback)
      : callback_(std::move(callback)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    return callback_();
  }

 private:
  const Callback callback_;
};

// One sample of a gauge family: its labels (name, value) and value.
struct GaugeSample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

// A gauge family for ScrapeCollectable callbacks. An empty `samples` gives
// a family with no series (the exposition then omits it).
prometheus::MetricFamily GaugeFamily(std::string name, std::string help,
                                     const std::vector<GaugeSample>& samples);

}  // namespace gasloc

#endif  // GASLOC_COMMON_SCRAPE_COLLECTABLE_H_
