#include "npy_rows.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

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

// Says why a descr cannot be a sample's dtype, in words a numpy user knows.
Status CheckDescr(const std::string& path, const std::string& descr, DType* dtype) {
  if (!descr.empty() && descr[0] == '[') {
    return Status::NotSupported(path + ": structured dtype " + Printable(descr) +
                                " is not supported; save each field as its own array");
  }
  const char kind = descr.size() >= 2 ? descr[1] : '\0';
  if (kind == 'O') {
    return Status::NotSupported(path +
                                ": object arrays (dtype 'O') hold Python objects, not "
                                "bytes, and cannot be imported; convert to a numeric dtype");
  }
  if (kind == 'U' || kind == 'S' || kind == 'a' || kind == 'V' || kind == 'M' || kind == 'm') {
    return Status::NotSupported(path + ": dtype '" + Printable(descr) +
                                "' is not numeric; only bool, integer, float and complex "
                                "arrays can be imported");
  }
  Status s = ParseDType(descr, dtype);
  if (!s.ok()) return Status::NotSupported(path + ": " + s.message());
  if (*dtype == DType::kBytes) {
    return Status::NotSupported(path + ": dtype '" + Printable(descr) + "' is not numeric");
  }
  return Status::OK();
}

}  // namespace

Status ParseNpyHeaderDict(const std::string& text, NpyHeader* header) {
  *header = NpyHeader();
  return DictParser(text).Parse(header);
}

NpyRowReader::~NpyRowReader() {
  if (file_ != nullptr) std::fclose(file_);
}

Status NpyRowReader::Open(const std::string& path, std::unique_ptr<NpyRowReader>* reader) {
  std::unique_ptr<NpyRowReader> r(new NpyRowReader());
  r->path_ = path;
  r->file_ = std::fopen(path.c_str(), "rb");
  if (r->file_ == nullptr) return Status::FromErrno(path, errno);
  struct stat st;
  if (fstat(fileno(r->file_), &st) != 0) return Status::FromErrno(path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  unsigned char pre[12];
  if (std::fread(pre, 1, 10, r->file_) != 10 || std::memcmp(pre, kMagic, kMagicLen) != 0) {
    return Status::Corruption(path + ": not a .npy file (no \\x93NUMPY magic at offset 0)");
  }
  const int major = pre[6];
  uint64_t header_len = 0;
  uint64_t prefix = 10;
  if (major == 1) {
    header_len = LittleEndian(pre + 8, 2);
  } else if (major == 2 || major == 3) {
    if (std::fread(pre + 10, 1, 2, r->file_) != 2) {
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
  if (std::fread(text.data(), 1, header_len, r->file_) != header_len) {
    return Status::Corruption(path + ": truncated .npy header at offset " + std::to_string(prefix));
  }
  NpyHeader header;
  Status parsed = ParseNpyHeaderDict(text, &header);
  if (!parsed.ok()) return Status::Corruption(path + ": " + parsed.message());

  OPT4STORE_RETURN_IF_ERROR(CheckDescr(path, header.descr, &r->dtype_));
  if (header.fortran_order) {
    return Status::NotSupported(path +
                                ": the array is in Fortran order; rows must be "
                                "contiguous: save np.ascontiguousarray(a) instead");
  }
  if (header.shape.empty()) {
    return Status::NotSupported(path + ": a 0-d array has no rows to import; reshape it to (1,)");
  }
  if (header.shape.size() > 33) {
    // A row keeps at most 32 dimensions in the value header.
    return Status::NotSupported(path + ": " + std::to_string(header.shape.size()) +
                                "-D arrays are not supported (rows of at most 32 dimensions)");
  }

  r->descr_ = header.descr;
  r->shape_ = header.shape;
  uint64_t row_bytes = DTypeSize(r->dtype_);
  for (size_t i = 1; i < r->shape_.size(); ++i) {
    const uint64_t d = r->shape_[i];
    if (d > static_cast<uint64_t>(INT64_MAX) || (d != 0 && row_bytes > UINT64_MAX / d)) {
      return Status::Corruption(path + ": the .npy shape overflows 64 bits");
    }
    row_bytes *= d;
    r->row_shape_.push_back(static_cast<int64_t>(d));
  }
  r->row_bytes_ = row_bytes;
  r->data_offset_ = prefix + header_len;
  const uint64_t rows = r->shape_[0];
  if (row_bytes != 0 && rows > (UINT64_MAX - r->data_offset_) / row_bytes) {
    return Status::Corruption(path + ": the .npy shape overflows 64 bits");
  }
  const uint64_t expected = r->data_offset_ + rows * row_bytes;
  if (file_size != expected) {
    return Status::Corruption(path + ": .npy data is " +
                              std::to_string(file_size - std::min(file_size, r->data_offset_)) +
                              " bytes, but the header's shape needs " +
                              std::to_string(rows * row_bytes) + " (mismatch at offset " +
                              std::to_string(std::min(file_size, expected)) + ")");
  }
  *reader = std::move(r);
  return Status::OK();
}

Status NpyRowReader::ReadRow(std::string* row) {
  if (rows_read_ >= rows()) {
    return Status::OutOfRange(path_ + ": all " + std::to_string(rows()) + " rows were read");
  }
  row->resize(row_bytes_);
  if (row_bytes_ != 0 && std::fread(row->data(), 1, row_bytes_, file_) != row_bytes_) {
    const int err = std::ferror(file_) ? errno : 0;
    const std::string where = path_ + ": row " + std::to_string(rows_read_) + " at offset " +
                              std::to_string(data_offset_ + rows_read_ * row_bytes_);
    // The size was checked at Open: a short read means the file changed.
    return err ? Status::FromErrno(where, err)
               : Status::IOError(where + ": unexpected end of file (was it truncated?)");
  }
  ++rows_read_;
  return Status::OK();
}

}  // namespace opt4store
