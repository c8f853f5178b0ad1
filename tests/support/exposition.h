// Parses what tests need from a Prometheus text exposition (a /metrics
// page) and from the metric tables of docs/metrics.md.
#ifndef GASLOC_TESTS_SUPPORT_EXPOSITION_H_
#define GASLOC_TESTS_SUPPORT_EXPOSITION_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gasloc::testing {

// One metric family of a scrape: its # TYPE and the label names its
// samples carry (histogram `le` excluded).
struct ScrapedFamily {
  std::string type;
  std::set<std::string> labels;
};

// One sample line: name{labels} value.
struct ScrapedSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Scrape {
  std::map<std::string, ScrapedFamily> families;  // by family name
  std::vector<ScrapedSample> samples;

  // The value of the sample `name` whose labels include `labels`;
  // nullopt if none.
  std::optional<double> Value(
      const std::string& name,
      const std::map<std::string, std::string>& labels = {}) const;
};

Scrape ParseExposition(const std::string& text);

// One row of a docs/metrics.md metric table.
struct DocumentedMetric {
  std::string name, type, unit, meaning;
  std::set<std::string> labels;
};

// The rows of the table under "## <section>" (e.g. "gasloc-worker").
std::vector<DocumentedMetric> DocumentedMetrics(const std::string& markdown,
                                                const std::string& section);

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_EXPOSITION_H_
