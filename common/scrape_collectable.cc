#include "common/scrape_collectable.h"

namespace gasloc {

prometheus::MetricFamily GaugeFamily(std::string name, std::string help,
                                     const std::vector<GaugeSample>& samples) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  family.metric.reserve(samples.size());
  for (const GaugeSample& sample : samples) {
    prometheus::ClientMetric metric;
    for (const auto& [label, value] : sample.labels)
      metric.label.push_back({label, value});
    metric.gauge.value = sample.value;
    family.metric.push_back(std::move(metric));
  }
  return family;
}

}  // namespace gasloc
