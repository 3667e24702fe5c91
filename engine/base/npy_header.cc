#include "engine/base/npy_header.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

namespace opt4store {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// numpy itself refuses headers over 10 000 bytes unless told otherwise;
// anything near a megabyte is not a header.
constexpr uint64_t kMaxHeaderLen = uint64_t{1} << 20;

std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 60)) out += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > 60) out += "...";
  return out;
}

// A cursor over the header's Python-literal dictionary.
class DictParser {
 public:
  explicit DictParser(const std::string& text) : text_(text) {}

  Status Parse(NpyHeader* header) {
    bool has_descr = false, has_order = false, has_shape = false;
    SkipSpace();
    if (!Eat('{')) return Bad("expected '{'");
    while (true) {
      SkipSpace();
      if (Eat('}')) break;
      std::string key;
      OPT4STORE_RETURN_IF_ERROR(String(&key));
      SkipSpace();
      if (!Eat(':')) return Bad("expected ':' after '" + key + "'");
      SkipSpace();
      if (key == "descr") {
        // A structured dtype is a list of fields: kept as text so that
        // Open() can say what it is.
        if (Peek() == '[') {
          OPT4STORE_RETURN_IF_ERROR(Balanced(&header->descr));
        } else {
          OPT4STORE_RETURN_IF_ERROR(String(&header->descr));
        }
        has_descr = true;
      } else if (key == "fortran_order") {
        if (EatWord("True")) {
          header->fortran_order = true;
        } else if (EatWord("False")) {
          header->fortran_order = false;
        } else {
          return Bad("fortran_order is neither True nor False");
        }
        has_order = true;
      } else if (key == "shape") {
        OPT4STORE_RETURN_IF_ERROR(Tuple(&header->shape));
        has_shape = true;
      } else {
        return Bad("unexpected key '" + Printable(key) + "'");
      }
      SkipSpace();
      if (Eat(',')) continue;
      SkipSpace();
      if (Eat('}')) break;
      return Bad("expected ',' or '}'");
    }
    const char* missing = !has_descr   ? "descr"
                          : !has_order ? "fortran_order"
                          : !has_shape ? "shape"
                                       : nullptr;
    if (missing != nullptr) {
      return Status::Corruption(std::string("the .npy header lacks '") + missing + "'");
    }
    return Status::OK();
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  bool EatWord(const char* word) {
    const size_t n = std::strlen(word);
    if (text_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  Status Bad(const std::string& what) const {
    return Status::Corruption("malformed .npy header at character " + std::to_string(pos_) + ": " +
                              what + " in \"" + Printable(text_) + "\"");
  }

  // 'text' or "text"; numpy writes no escapes in these keys and codes.
  Status String(std::string* out) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Bad("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) return Bad("unterminated string");
    *out = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return Status::OK();
  }

  // A bracketed value, copied whole (nested brackets and quotes respected).
  Status Balanced(std::string* out) {
    const size_t start = pos_;
    int depth = 0;
    char quote = '\0';
    for (; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (quote != '\0') {
        if (c == quote) quote = '\0';
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '[' || c == '(') {
        ++depth;
      } else if (c == ']' || c == ')') {
        if (--depth == 0) {
          ++pos_;
          *out = text_.substr(start, pos_ - start);
          return Status::OK();
        }
      }
    }
    return Bad("unterminated list");
  }

  // (), (5,), (3, 4); Python 2 wrote longs as "3L".
  Status Tuple(std::vector<uint64_t>* dims) {
    dims->clear();
    if (!Eat('(')) return Bad("shape is not a tuple");
    while (true) {
      SkipSpace();
      if (Eat(')')) return Status::OK();
      if (Peek() < '0' || Peek() > '9') return Bad("shape holds a non-integer");
      uint64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        const uint64_t digit = static_cast<uint64_t>(Peek() - '0');
        if (v > (UINT64_MAX - digit) / 10) return Bad("a dimension overflows 64 bits");
        v = v * 10 + digit;
        ++pos_;
      }
      Eat('L');
      dims->push_back(v);
      SkipSpace();
      if (Eat(',')) continue;
      SkipSpace();
      if (Eat(')')) return Status::OK();
      return Bad("expected ',' or ')' in shape");
    }
  }

  const std::string& text_;
  size_t pos_ = 0;
};

uint64_t LittleEndian(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

Status ParseNpyHeaderDict(const std::string& text, NpyHeader* header) {
  header->descr.clear();
  header->fortran_order = false;
  header->shape.clear();
  return DictParser(text).Parse(header);
}

Status ReadNpyHeader(const std::string& path, std::FILE* file, NpyHeader* header) {
  unsigned char pre[12];
  if (std::fread(pre, 1, 10, file) != 10 || std::memcmp(pre, kMagic, kMagicLen) != 0) {
    return Status::Corruption(path + ": not a .npy file (no \\x93NUMPY magic at offset 0)");
  }
  const int major = pre[6];
  uint64_t header_len = 0;
  uint64_t prefix = 10;
  if (major == 1) {
    header_len = LittleEndian(pre + 8, 2);
  } else if (major == 2 || major == 3) {
    if (std::fread(pre + 10, 1, 2, file) != 2) {
      return Status::Corruption(path + ": truncated .npy header at offset 10");
    }
    header_len = LittleEndian(pre + 8, 4);
    prefix = 12;
  } else {
    return Status::NotSupported(path + ": .npy format version " + std::to_string(major) + "." +
                                std::to_string(pre[7]) + " is not supported (1.0 to 3.0 are)");
  }
  if (header_len > kMaxHeaderLen) {
    return Status::Corruption(path + ": .npy header length " + std::to_string(header_len) +
                              " at offset 8 is implausible");
  }
  std::string text(header_len, '\0');
  if (std::fread(text.data(), 1, header_len, file) != header_len) {
    return Status::Corruption(path + ": truncated .npy header at offset " + std::to_string(prefix));
  }
  Status parsed = ParseNpyHeaderDict(text, header);
  if (!parsed.ok()) return Status::Corruption(path + ": " + parsed.message());
  header->major_version = major;
  header->data_offset = prefix + header_len;
  return Status::OK();
}

Status NpyDataBytes(const std::string& path, const NpyHeader& header, uint64_t item_size,
                    uint64_t* bytes) {
  uint64_t total = item_size;
  for (uint64_t d : header.shape) {
    if (d != 0 && total > UINT64_MAX / d) {
      return Status::Corruption(path + ": the .npy shape overflows 64 bits");
    }
    total *= d;
  }
  *bytes = total;
  return Status::OK();
}

Status CheckNpyFileSize(const std::string& path, const NpyHeader& header, uint64_t item_size,
                        uint64_t file_size) {
  uint64_t data_bytes = 0;
  OPT4STORE_RETURN_IF_ERROR(NpyDataBytes(path, header, item_size, &data_bytes));
  if (data_bytes > UINT64_MAX - header.data_offset) {
    return Status::Corruption(path + ": the .npy shape overflows 64 bits");
  }
  const uint64_t expected = header.data_offset + data_bytes;
  if (file_size != expected) {
    return Status::Corruption(path + ": .npy data is " +
                              std::to_string(file_size - std::min(file_size, header.data_offset)) +
                              " bytes, but the header's shape needs " +
                              std::to_string(data_bytes) + " (mismatch at offset " +
                              std::to_string(std::min(file_size, expected)) + ")");
  }
  return Status::OK();
}

std::string EncodeNpyHeader(const std::string& descr, const std::vector<uint64_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += (i ? ", " : "") + std::to_string(shape[i]);
  }
  dict += shape.size() == 1 ? ",), }" : "), }";
  // Magic, version, a 2-byte length, the dict and its '\n': a multiple of 64.
  const size_t unpadded = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  assert(dict.size() <= 0xFFFF);
  std::string head(kMagic, kMagicLen);
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(dict.size() & 0xFF);
  head += static_cast<char>((dict.size() >> 8) & 0xFF);
  return head + dict;
}

}  // namespace opt4store
