#include "bench/sim_scenario.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gasloc::bench {
namespace {

using FlowMap = std::map<std::string, std::string>;

// "{a: 1, b: x}" -> {a: "1", b: "x"}.
absl::StatusOr<FlowMap> ParseFlowMap(absl::string_view value, int line) {
  if (!absl::ConsumePrefix(&value, "{") || !absl::ConsumeSuffix(&value, "}"))
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ": expected {key: value, ...}"));
  FlowMap out;
  for (absl::string_view item :
       absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    if (key.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": an entry without a key"));
    out[std::string(key)] = std::string(absl::StripAsciiWhitespace(kv.second));
  }
  return out;
}

// The number at `key` of `map` into *out (left as is when absent).
absl::Status Number(const FlowMap& map, const std::string& key, int line,
                    double* out) {
  auto it = map.find(key);
  if (it == map.end()) return absl::OkStatus();
  if (!absl::SimpleAtod(it->second, out) || *out < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "line ", line, ": ", key, " must be a number >= 0, got ", it->second));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimScenario> ParseSimScenario(absl::string_view text) {
  SimScenario out;
  FlowMap defaults;
  std::string section;
  double batch = 0, context = 0;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(
        raw.substr(0, std::min(raw.size(), raw.find('#'))));
    if (line.empty()) continue;
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "- ") || rest == "-") {
      if (section != "workers")
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_number, ": a list entry outside workers:"));
      auto entry = ParseFlowMap(absl::StripAsciiWhitespace(rest), line_number);
      if (!entry.ok()) return entry.status();
      FlowMap merged = defaults;
      for (const auto& [k, v] : *entry) merged[k] = v;
      ScenarioWorker w;
      double count = 1;
      for (auto [key, field] :
           {std::pair<const char*, double*>{"rate_mbit", &w.rate_mbit},
            {"delay_ms", &w.delay_ms},
            {"cpu", &w.cpu},
            {"count", &count}}) {
        absl::Status s = Number(merged, key, line_number, field);
        if (!s.ok()) return s;
      }
      for (int i = 0; i < static_cast<int>(count); ++i)
        out.workers.push_back(w);
      continue;
    }
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(rest, absl::MaxSplits(':', 1));
    section = std::string(absl::StripAsciiWhitespace(kv.first));
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (section == "name") out.name = std::string(value);
    if (value.empty() || value.front() != '{') continue;
    auto map = ParseFlowMap(value, line_number);
    if (!map.ok()) return map.status();
    double steps = 0, min_steps = 0;
    absl::Status s;
    if (section == "defaults") defaults = *map;
    if (section == "model") {
      s.Update(Number(*map, "batch", line_number, &batch));
      s.Update(Number(*map, "context", line_number, &context));
    }
    if (section == "training") {
      s.Update(Number(*map, "local_steps", line_number, &steps));
      s.Update(Number(*map, "min_local_steps", line_number, &min_steps));
      out.local_steps = static_cast<uint32_t>(steps);
      out.min_local_steps = static_cast<uint32_t>(min_steps);
    }
    if (section == "stop") {
      double rounds = 0;
      s.Update(
          Number(*map, "max_wall_seconds", line_number, &out.max_wall_seconds));
      s.Update(Number(*map, "max_rounds", line_number, &rounds));
      out.max_rounds = static_cast<uint32_t>(rounds);
    }
    if (!s.ok()) return s;
  }
  if (out.workers.empty())
    return absl::InvalidArgumentError("no workers: list");
  out.tokens_per_step = static_cast<uint32_t>(batch * context);
  return out;
}

absl::StatusOr<SimScenario> LoadSimScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = ParseSimScenario(text.str());
  if (!parsed.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", parsed.status().message()));
  return parsed;
}

std::vector<ScenarioWorker> ExpandWorkers(
    const std::vector<ScenarioWorker>& pattern, uint32_t n) {
  std::vector<ScenarioWorker> out;
  if (pattern.empty()) return out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(pattern[i % pattern.size()]);
  return out;
}

}  // namespace gasloc::bench
