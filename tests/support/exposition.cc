#include "tests/support/exposition.h"

#include <cstdlib>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gasloc::testing {
namespace {

// "a=\"x\",b=\"y\"" -> {a: x, b: y} (values without escapes suffice here).
std::map<std::string, std::string> ParseLabels(absl::string_view text) {
  std::map<std::string, std::string> labels;
  while (!text.empty()) {
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos) break;
    const std::string name(absl::StripAsciiWhitespace(text.substr(0, eq)));
    text.remove_prefix(eq + 2);  // past ="
    const size_t close = text.find('"');
    labels[name] = std::string(text.substr(0, close));
    text.remove_prefix(close + 1);
    absl::ConsumePrefix(&text, ",");
  }
  return labels;
}

// The family a sample belongs to: histogram samples carry a suffix.
std::string FamilyOf(const std::string& sample,
                     const std::map<std::string, ScrapedFamily>& families) {
  if (families.count(sample)) return sample;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    absl::string_view base = sample;
    if (absl::ConsumeSuffix(&base, suffix) && families.count(std::string(base)))
      return std::string(base);
  }
  return sample;
}

}  // namespace

std::optional<double> Scrape::Value(
    const std::string& name,
    const std::map<std::string, std::string>& labels) const {
  for (const ScrapedSample& sample : samples) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = sample.labels.find(k);
      if (it == sample.labels.end() || it->second != v) match = false;
    }
    if (match) return sample.value;
  }
  return std::nullopt;
}

Scrape ParseExposition(const std::string& text) {
  Scrape scrape;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 4) scrape.families[parts[2]].type = parts[3];
      continue;
    }
    if (line[0] == '#') continue;
    ScrapedSample sample;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (brace != std::string::npos && brace < space) {
      sample.name = line.substr(0, brace);
      const size_t close = line.rfind('}');
      sample.labels = ParseLabels(
          absl::string_view(line).substr(brace + 1, close - brace - 1));
    } else {
      sample.name = line.substr(0, space);
    }
    sample.value = std::strtod(line.c_str() + space + 1, nullptr);
    ScrapedFamily& family = scrape.families[FamilyOf(sample.name, scrape.families)];
    for (const auto& [k, v] : sample.labels)
      if (k != "le") family.labels.insert(k);
    scrape.samples.push_back(std::move(sample));
  }
  return scrape;
}

std::vector<DocumentedMetric> DocumentedMetrics(const std::string& markdown,
                                                const std::string& section) {
  std::vector<DocumentedMetric> rows;
  std::istringstream in(markdown);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "## ")) {
      inside = line == "## " + section;
      continue;
    }
    if (!inside || !absl::StartsWith(line, "| `gasloc_")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    // "", name, type, unit, labels, meaning, ""
    if (cells.size() < 7) continue;
    for (std::string& cell : cells)
      cell = std::string(absl::StripAsciiWhitespace(cell));
    DocumentedMetric row;
    row.name = std::string(absl::StripSuffix(absl::StripPrefix(cells[1], "`"), "`"));
    row.type = cells[2];
    row.unit = cells[3];
    if (cells[4] != "-") {
      for (absl::string_view label : absl::StrSplit(cells[4], ',')) {
        label = absl::StripAsciiWhitespace(label);
        label = absl::StripSuffix(absl::StripPrefix(label, "`"), "`");
        row.labels.insert(std::string(label));
      }
    }
    row.meaning = cells[5];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace gasloc::testing
