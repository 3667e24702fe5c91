// JsonWriter: a tiny streaming JSON writer for the CLI's --json output.
//
// The output is deterministic by construction: keys come out in the order
// they are written, separators are fixed (", " and ": ", as Python's
// json.dumps), and doubles use a fixed "%.<precision>f" format, so two runs
// of the same command print byte-identical JSON. Non-finite doubles become
// null. Strings are escaped per RFC 8259; bytes >= 0x80 pass through as
// UTF-8.
//
// Thread safety: not thread-safe; one owner.
#ifndef OPT4STORE_TOOLS_JSON_WRITER_H_
#define OPT4STORE_TOOLS_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace opt4store {

class JsonWriter {
 public:
  JsonWriter() = default;
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();

  // Inside an object, every value is preceded by its key.
  void Key(std::string_view key);

  void String(std::string_view value);
  void Uint(uint64_t value);
  void Int(int64_t value);
  void Double(double value, int precision = 6);
  void Bool(bool value);
  void Null();

  // Key + value shorthands.
  void Field(std::string_view key, std::string_view value) { Key(key); String(value); }
  void Field(std::string_view key, const char* value) { Key(key); String(value); }
  void Field(std::string_view key, uint64_t value) { Key(key); Uint(value); }
  void Field(std::string_view key, double value, int precision = 6) {
    Key(key);
    Double(value, precision);
  }
  void Field(std::string_view key, bool value) { Key(key); Bool(value); }

  // The text so far. Complete once every Begin has its End.
  const std::string& str() const { return out_; }

  // Appends value to *out as a quoted, escaped JSON string.
  static void AppendQuoted(std::string_view value, std::string* out);

 private:
  // Writes the separator that goes before a value or a key.
  void BeforeValue();

  std::string out_;
  // One entry per open container: whether it holds an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_JSON_WRITER_H_
