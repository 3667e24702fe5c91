#include "opt4store/number_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/base/npy_header.h"

namespace opt4store {

namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > 40) out += "...";
  return out + "'";
}

// The dtypes a number file takes: little-endian 4- or 8-byte integers.
Status CheckNpyHeader(const std::string& path, const NpyHeader& header, int* width,
                      bool* is_signed) {
  const std::string& type = header.descr;
  if (type == "<i4" || type == "<u4" || type == "<i8" || type == "<u8") {
    *is_signed = type[1] == 'i';
    *width = type[2] - '0';
  } else {
    return Status::NotSupported(path + ": .npy dtype " + Quote(type) +
                                " is not supported (use little-endian int32, int64, "
                                "uint32 or uint64)");
  }
  if (header.fortran_order) {
    return Status::NotSupported(path + ": .npy in Fortran order is not supported");
  }
  if (header.shape.empty() || header.shape.size() > 2) {
    return Status::NotSupported(path + ": .npy array must be 1-D or 2-D, not " +
                                std::to_string(header.shape.size()) + "-D");
  }
  return Status::OK();
}

}  // namespace

const char* NumberFormatName(NumberFormat format) {
  switch (format) {
    case NumberFormat::kText: return "txt";
    case NumberFormat::kU32: return "u32";
    case NumberFormat::kU64: return "u64";
    case NumberFormat::kNpy: return "npy";
  }
  return "unknown";
}

Status ParseNumberFormat(std::string_view name, NumberFormat* format) {
  for (NumberFormat f :
       {NumberFormat::kText, NumberFormat::kU32, NumberFormat::kU64, NumberFormat::kNpy}) {
    if (name == NumberFormatName(f)) {
      *format = f;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown format '" + std::string(name) +
                                 "' (expected txt, u32, u64 or npy)");
}

NumberFormat NumberFormatFromPath(const std::string& path) {
  if (EndsWith(path, ".u32")) return NumberFormat::kU32;
  if (EndsWith(path, ".u64")) return NumberFormat::kU64;
  if (EndsWith(path, ".npy")) return NumberFormat::kNpy;
  return NumberFormat::kText;
}

NumberFileReader::~NumberFileReader() {
  if (file_) std::fclose(file_);
}

Status NumberFileReader::Open(const std::string& path, std::unique_ptr<NumberFileReader>* reader) {
  std::unique_ptr<NumberFileReader> r(new NumberFileReader());
  r->path_ = path;
  r->format_ = NumberFormatFromPath(path);
  r->file_ = std::fopen(path.c_str(), "rb");
  if (!r->file_) return Status::FromErrno(path, errno);
  struct stat st;
  if (fstat(fileno(r->file_), &st) != 0) return Status::FromErrno(path, errno);
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + ": is a directory");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  switch (r->format_) {
    case NumberFormat::kText:
      break;
    case NumberFormat::kU32:
    case NumberFormat::kU64: {
      r->width_ = r->format_ == NumberFormat::kU32 ? 4 : 8;
      if (file_size % r->width_ != 0) {
        return Status::Corruption(path + ": size " + std::to_string(file_size) +
                                  " is not a multiple of " + std::to_string(r->width_) +
                                  " bytes; trailing bytes at offset " +
                                  std::to_string(file_size - file_size % r->width_));
      }
      r->binary_count_ = file_size / r->width_;
      break;
    }
    case NumberFormat::kNpy: {
      NpyHeader header;
      OPT4STORE_RETURN_IF_ERROR(ReadNpyHeader(path, r->file_, &header));
      OPT4STORE_RETURN_IF_ERROR(CheckNpyHeader(path, header, &r->width_, &r->signed_));
      OPT4STORE_RETURN_IF_ERROR(CheckNpyFileSize(path, header, r->width_, file_size));
      const std::vector<uint64_t>& dims = header.shape;
      r->data_offset_ = header.data_offset;
      r->binary_count_ = dims.size() == 1 ? dims[0] : dims[0] * dims[1];
      r->npy_rows_ = dims.size() == 2 ? dims[0] : 0;
      break;
    }
  }
  *reader = std::move(r);
  return Status::OK();
}

Status NumberFileReader::Read(uint64_t* out, size_t max, size_t* count, uint64_t max_value) {
  *count = 0;
  if (format_ == NumberFormat::kText) return ReadText(out, max, count, max_value);
  return ReadBinary(out, max, count, max_value);
}

Status NumberFileReader::ReadText(uint64_t* out, size_t max, size_t* count,
                                  uint64_t max_value) {
  size_t n = 0;
  char* line = nullptr;
  size_t cap = 0;
  Status status;
  while (n < max) {
    ssize_t len = getline(&line, &cap, file_);
    if (len < 0) {
      if (std::ferror(file_)) status = Status::FromErrno(path_, errno);
      break;
    }
    ++line_;
    std::string_view s(line, static_cast<size_t>(len));
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' ||
                          s.back() == '\t')) {
      s.remove_suffix(1);
    }
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    if (s.empty() || s.front() == '#') continue;
    uint64_t v = 0;
    bool valid = s.size() <= 20;
    for (char c : s) {
      if (c < '0' || c > '9') {
        valid = false;
        break;
      }
      uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) {
        valid = false;
        break;
      }
      v = v * 10 + d;
    }
    if (!valid) {
      status = Status::InvalidArgument(path_ + ":" + std::to_string(line_) + ": " + Quote(s) +
                                       " is not a non-negative integer");
      break;
    }
    if (v > max_value) {
      status = Status::OutOfRange(path_ + ":" + std::to_string(line_) + ": value " +
                                  std::to_string(v) + " exceeds the maximum " +
                                  std::to_string(max_value));
      break;
    }
    out[n++] = v;
  }
  std::free(line);
  *count = status.ok() ? n : 0;
  consumed_ += *count;
  return status;
}

Status NumberFileReader::ReadBinary(uint64_t* out, size_t max, size_t* count,
                                    uint64_t max_value) {
  const uint64_t left = binary_count_ - consumed_;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max, left));
  if (n == 0) return Status::OK();
  if (consumed_ == 0 && data_offset_ > 0 &&
      std::fseek(file_, static_cast<long>(data_offset_), SEEK_SET) != 0) {
    return Status::FromErrno(path_, errno);
  }
  buffer_.resize(n * width_);
  size_t got = std::fread(buffer_.data(), 1, buffer_.size(), file_);
  if (got != buffer_.size()) {
    return Status::Corruption(path_ + ": truncated at offset " +
                              std::to_string(data_offset_ + consumed_ * width_ + got));
  }
  const unsigned char* p = reinterpret_cast<const unsigned char*>(buffer_.data());
  for (size_t i = 0; i < n; ++i, p += width_) {
    uint64_t v = 0;
    for (int b = width_ - 1; b >= 0; --b) v = (v << 8) | p[b];
    const uint64_t offset = data_offset_ + (consumed_ + i) * width_;
    if (signed_ && (p[width_ - 1] & 0x80)) {
      return Status::InvalidArgument(path_ + ": negative value at offset " +
                                     std::to_string(offset) + " (element " +
                                     std::to_string(consumed_ + i) + ")");
    }
    if (v > max_value) {
      return Status::OutOfRange(path_ + ": value " + std::to_string(v) + " at offset " +
                                std::to_string(offset) + " (element " +
                                std::to_string(consumed_ + i) + ") exceeds the maximum " +
                                std::to_string(max_value));
    }
    out[i] = v;
  }
  consumed_ += n;
  *count = n;
  return Status::OK();
}

Status SummarizeNumberFile(const std::string& path, uint64_t max_value,
                           NumberFileSummary* summary) {
  std::unique_ptr<NumberFileReader> reader;
  OPT4STORE_RETURN_IF_ERROR(NumberFileReader::Open(path, &reader));
  *summary = NumberFileSummary();
  summary->format = reader->format();
  summary->npy_rows = reader->npy_rows();
  std::vector<uint64_t> chunk(1 << 16);
  for (;;) {
    size_t n = 0;
    OPT4STORE_RETURN_IF_ERROR(reader->Read(chunk.data(), chunk.size(), &n, max_value));
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) summary->max_value = std::max(summary->max_value, chunk[i]);
    summary->count += n;
  }
  return Status::OK();
}

Status ReadNumberFile(const std::string& path, uint64_t max_value, std::vector<uint64_t>* values) {
  std::unique_ptr<NumberFileReader> reader;
  OPT4STORE_RETURN_IF_ERROR(NumberFileReader::Open(path, &reader));
  values->clear();
  std::vector<uint64_t> chunk(1 << 16);
  for (;;) {
    size_t n = 0;
    OPT4STORE_RETURN_IF_ERROR(reader->Read(chunk.data(), chunk.size(), &n, max_value));
    if (n == 0) break;
    values->insert(values->end(), chunk.begin(), chunk.begin() + static_cast<ptrdiff_t>(n));
  }
  return Status::OK();
}

NumberFileWriter::~NumberFileWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

Status NumberFileWriter::Open(const std::string& path, NumberFormat format, uint64_t total,
                              uint64_t rows, std::unique_ptr<NumberFileWriter>* writer) {
  std::unique_ptr<NumberFileWriter> w(new NumberFileWriter());
  w->path_ = path;
  w->tmp_path_ = path + ".tmp";
  w->format_ = format;
  w->total_ = total;
  if (rows > 0 && (format != NumberFormat::kNpy || total % rows != 0)) {
    return Status::InvalidArgument("rows apply to .npy output and must divide the count");
  }
  w->file_ = std::fopen(w->tmp_path_.c_str(), "wb");
  if (!w->file_) return Status::FromErrno(path + ": cannot create it", errno);
  if (format == NumberFormat::kNpy) {
    const std::string head = EncodeNpyHeader(
        "<i8", rows > 0 ? std::vector<uint64_t>{rows, total / rows} : std::vector<uint64_t>{total});
    if (std::fwrite(head.data(), 1, head.size(), w->file_) != head.size()) {
      return Status::FromErrno(w->tmp_path_, errno);
    }
  }
  *writer = std::move(w);
  return Status::OK();
}

Status NumberFileWriter::Append(const uint64_t* values, size_t count) {
  if (written_ + count > total_) {
    return Status::InvalidArgument(path_ + ": more values appended than announced");
  }
  scratch_.clear();
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = values[i];
    switch (format_) {
      case NumberFormat::kText:
        scratch_ += std::to_string(v);
        scratch_ += '\n';
        break;
      case NumberFormat::kU32:
        if (v > UINT32_MAX) {
          return Status::OutOfRange(path_ + ": value " + std::to_string(v) +
                                    " does not fit in u32");
        }
        for (int b = 0; b < 4; ++b) scratch_ += static_cast<char>((v >> (8 * b)) & 0xFF);
        break;
      case NumberFormat::kU64:
      case NumberFormat::kNpy:
        if (format_ == NumberFormat::kNpy && v > INT64_MAX) {
          return Status::OutOfRange(path_ + ": value " + std::to_string(v) +
                                    " does not fit in int64");
        }
        for (int b = 0; b < 8; ++b) scratch_ += static_cast<char>((v >> (8 * b)) & 0xFF);
        break;
    }
  }
  if (std::fwrite(scratch_.data(), 1, scratch_.size(), file_) != scratch_.size()) {
    return Status::FromErrno(tmp_path_, errno);
  }
  written_ += count;
  return Status::OK();
}

Status NumberFileWriter::Finish() {
  if (written_ != total_) {
    return Status::InvalidArgument(path_ + ": " + std::to_string(written_) + " of " +
                                   std::to_string(total_) + " values written");
  }
  if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0) {
    return Status::FromErrno(tmp_path_, errno);
  }
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return Status::FromErrno(tmp_path_, errno);
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) return Status::FromErrno(path_, errno);
  return Status::OK();
}

}  // namespace opt4store
