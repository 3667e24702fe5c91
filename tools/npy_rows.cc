#include "npy_rows.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/base/npy_header.h"

namespace opt4store {

namespace {

std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 60)) out += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > 60) out += "...";
  return out;
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

  NpyHeader header;
  OPT4STORE_RETURN_IF_ERROR(ReadNpyHeader(path, r->file_, &header));

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
  for (size_t i = 1; i < r->shape_.size(); ++i) {
    if (r->shape_[i] > static_cast<uint64_t>(INT64_MAX)) {
      return Status::Corruption(path + ": the .npy shape overflows 64 bits");
    }
    r->row_shape_.push_back(static_cast<int64_t>(r->shape_[i]));
  }
  OPT4STORE_RETURN_IF_ERROR(CheckNpyFileSize(path, header, DTypeSize(r->dtype_), file_size));
  // A row: shape[1:] of the element size.
  NpyHeader row = header;
  row.shape.erase(row.shape.begin());
  OPT4STORE_RETURN_IF_ERROR(NpyDataBytes(path, row, DTypeSize(r->dtype_), &r->row_bytes_));
  r->data_offset_ = header.data_offset;
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
