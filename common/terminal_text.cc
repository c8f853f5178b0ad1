#include "common/terminal_text.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"

namespace gasloc {

std::string EscapeForTerminal(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // U+0080..U+009F (C1 controls: CSI is U+009B) in UTF-8.
      out += absl::StrFormat("\\u%04x",
                             static_cast<unsigned char>(text[i + 1]));
      ++i;
    } else if (c >= 0x80 && c <= 0x9f) {
      // A lone C1 byte (terminals in 8-bit mode read it as a control).
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void EscapeStringFields(google::protobuf::Message* message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        field->type() != FieldDescriptor::TYPE_BYTES) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i)
          reflection->SetRepeatedString(
              message, field, i,
              EscapeForTerminal(
                  reflection->GetRepeatedString(*message, field, i)));
      } else {
        reflection->SetString(
            message, field,
            EscapeForTerminal(reflection->GetString(*message, field)));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i)
          EscapeStringFields(
              reflection->MutableRepeatedMessage(message, field, i));
      } else {
        EscapeStringFields(reflection->MutableMessage(message, field));
      }
    }
  }
}

}  // namespace gasloc
