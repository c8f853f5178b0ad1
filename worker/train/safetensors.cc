#include "worker/train/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace gasloc {
namespace {

using google::protobuf::Value;

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8},   {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF16, "F16", 2},   {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI64, "I64", 8},   {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2},   {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kU64, "U64", 8},   {SafetensorsDtype::kU32, "U32", 4},
    {SafetensorsDtype::kU16, "U16", 2},   {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kBool, "BOOL", 1},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[1];
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", what));
}

// A JSON number that is a whole number in [0, 2^53].
bool AsCount(const Value& v, uint64_t* out) {
  if (v.kind_case() != Value::kNumberValue) return false;
  const double x = v.number_value();
  if (!(x >= 0 && x <= 9007199254740992.0) || std::floor(x) != x) return false;
  *out = static_cast<uint64_t>(x);
  return true;
}

struct Span {
  uint64_t begin = 0, end = 0;
  size_t index = 0;  // into the file's tensors
};

absl::StatusOr<SafetensorsView> ParseEntry(const std::string& name,
                                           const Value& value, Span* span) {
  const auto quoted = absl::StrCat("tensor \"", name, "\"");
  if (value.kind_case() != Value::kStructValue)
    return Malformed(absl::StrCat(quoted, " is not a JSON object"));
  const auto& fields = value.struct_value().fields();
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!fields.contains(key))
      return Malformed(absl::StrCat(quoted, " has no \"", key, "\""));
  }
  SafetensorsView view;
  view.name = name;
  const Value& dtype = fields.at("dtype");
  const DtypeInfo* info = nullptr;
  if (dtype.kind_case() == Value::kStringValue) {
    for (const DtypeInfo& d : kDtypes) {
      if (dtype.string_value() == d.name) info = &d;
    }
  }
  if (info == nullptr)
    return Malformed(absl::StrCat(quoted, " has an unknown dtype"));
  view.dtype = info->dtype;
  const Value& shape = fields.at("shape");
  if (shape.kind_case() != Value::kListValue)
    return Malformed(absl::StrCat(quoted, "'s shape is not a list"));
  uint64_t elements = 1;
  for (const Value& dim : shape.list_value().values()) {
    uint64_t n = 0;
    if (!AsCount(dim, &n))
      return Malformed(absl::StrCat(quoted, "'s shape has a dimension that "
                                            "is not a non-negative integer"));
    if (n != 0 && elements > (uint64_t{1} << 53) / n)
      return Malformed(absl::StrCat(quoted, "'s shape is too large"));
    elements *= n;
    view.shape.push_back(static_cast<int64_t>(n));
  }
  const Value& offsets = fields.at("data_offsets");
  if (offsets.kind_case() != Value::kListValue ||
      offsets.list_value().values_size() != 2 ||
      !AsCount(offsets.list_value().values(0), &span->begin) ||
      !AsCount(offsets.list_value().values(1), &span->end) ||
      span->end < span->begin)
    return Malformed(absl::StrCat(
        quoted, "'s data_offsets are not [begin, end] with begin <= end"));
  if (span->end - span->begin != elements * info->bytes)
    return Malformed(absl::StrCat(
        quoted, "'s data_offsets span ", span->end - span->begin,
        " bytes; ", info->name, " x ", elements, " elements is ",
        elements * info->bytes));
  return view;
}

}  // namespace

absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype) {
  return Info(dtype).name;
}

size_t SafetensorsDtypeBytes(SafetensorsDtype dtype) {
  return Info(dtype).bytes;
}

const SafetensorsView* SafetensorsFile::Find(absl::string_view name) const {
  for (const SafetensorsView& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string EncodeSafetensors(
    const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (header.size() > 1) header.push_back(',');
    AppendJsonString(t.name, &header);
    absl::StrAppend(&header, ":{\"dtype\":\"", SafetensorsDtypeName(t.dtype),
                    "\",\"shape\":[");
    for (size_t i = 0; i < t.shape.size(); ++i) {
      absl::StrAppend(&header, i > 0 ? "," : "", t.shape[i]);
    }
    absl::StrAppend(&header, "],\"data_offsets\":[", offset, ",",
                    offset + t.data.size(), "]}");
    offset += t.data.size();
  }
  if (!metadata.empty()) {
    if (header.size() > 1) header.push_back(',');
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header.push_back(',');
      first = false;
      AppendJsonString(key, &header);
      header.push_back(':');
      AppendJsonString(value, &header);
    }
    header.push_back('}');
  }
  header.push_back('}');
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  out += header;
  out.reserve(out.size() + offset);
  for (const SafetensorsTensor& t : tensors) out += t.data;
  return out;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes) {
  if (bytes.size() < 8)
    return Malformed(absl::StrCat("file is ", bytes.size(),
                                  " bytes, shorter than the 8-byte header "
                                  "length (truncated)"));
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i)
    header_bytes |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    return Malformed(absl::StrCat("header length ", header_bytes,
                                  " is over the limit of ",
                                  kMaxSafetensorsHeaderBytes, " bytes"));
  if (header_bytes > bytes.size() - 8)
    return Malformed(absl::StrCat("header length ", header_bytes,
                                  " runs past the end of the ", bytes.size(),
                                  "-byte file (truncated)"));
  const absl::string_view header = bytes.substr(8, header_bytes);
  const absl::string_view data = bytes.substr(8 + header_bytes);
  if (header.find_first_not_of(" \t\r\n") == absl::string_view::npos ||
      header[header.find_first_not_of(" \t\r\n")] != '{')
    return Malformed("header is not a JSON object");
  google::protobuf::Struct json;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      std::string(header), &json);
  if (!parsed.ok())
    return Malformed(absl::StrCat("header is not valid JSON: ",
                                  parsed.ToString()));
  SafetensorsFile file;
  std::vector<Span> spans;
  // Struct's map has no order; sort the names so errors are reproducible.
  std::vector<std::string> names;
  for (const auto& [name, value] : json.fields()) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const Value& value = json.fields().at(name);
    if (name == "__metadata__") {
      if (value.kind_case() != Value::kStructValue)
        return Malformed("__metadata__ is not a JSON object");
      for (const auto& [key, v] : value.struct_value().fields()) {
        if (v.kind_case() != Value::kStringValue)
          return Malformed(absl::StrCat("__metadata__ value \"", key,
                                        "\" is not a string"));
        file.metadata[key] = v.string_value();
      }
      continue;
    }
    Span span;
    auto view = ParseEntry(name, value, &span);
    if (!view.ok()) return view.status();
    span.index = file.tensors.size();
    spans.push_back(span);
    file.tensors.push_back(std::move(*view));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    const std::string& name = file.tensors[s.index].name;
    if (s.end > data.size())
      return Malformed(absl::StrCat("tensor \"", name, "\"'s data_offsets [",
                                    s.begin, ", ", s.end, ") run past the ",
                                    data.size(), " data bytes (truncated)"));
    if (s.begin < covered)
      return Malformed(absl::StrCat(
          "tensor \"", name, "\"'s data_offsets [", s.begin, ", ", s.end,
          ") overlap tensor \"", file.tensors[spans[i - 1].index].name,
          "\"'s"));
    if (s.begin > covered)
      return Malformed(absl::StrCat("a gap of ", s.begin - covered,
                                    " bytes before tensor \"", name, "\""));
    covered = s.end;
  }
  if (covered != data.size())
    return Malformed(absl::StrCat("tensors cover ", covered, " of the ",
                                  data.size(), " data bytes"));
  std::vector<SafetensorsView> ordered;
  ordered.reserve(spans.size());
  for (const Span& s : spans) {
    SafetensorsView view = std::move(file.tensors[s.index]);
    view.data = data.substr(s.begin, s.end - s.begin);
    ordered.push_back(std::move(view));
  }
  file.tensors = std::move(ordered);
  return file;
}

}  // namespace gasloc
