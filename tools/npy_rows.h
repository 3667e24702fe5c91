// NpyRowReader: streams the rows of a NumPy .npy file (format 1.0, 2.0 and
// 3.0) along axis 0, one row at a time, so that `opt4store import` can turn
// an array of any size into samples without loading it whole.
//
// Accepted: C order, any fixed-size little-endian numeric dtype that
// ParseDType (value.h) knows (bool, int8..int64, uint8..uint64, float16,
// float32, float64, complex64, complex128), any number of dimensions >= 1.
// A 1-D array's rows are scalars (shape ()); an N-D array's rows have shape
// shape[1:]. Rejected with a message that says why: Fortran order, object
// and structured dtypes, strings, big-endian dtypes, 0-D arrays, and a file
// whose data does not match its header's shape (named with the offset).
// The header itself is read by the engine's one .npy reader
// (engine/base/npy_header.h).
//
// Thread safety: not thread-safe; one owner.
#ifndef OPT4STORE_TOOLS_NPY_ROWS_H_
#define OPT4STORE_TOOLS_NPY_ROWS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "opt4store/status.h"
#include "opt4store/value.h"

namespace opt4store {

class NpyRowReader {
 public:
  ~NpyRowReader();
  NpyRowReader(const NpyRowReader&) = delete;
  NpyRowReader& operator=(const NpyRowReader&) = delete;

  // Opens path and checks its header and its size against the shape.
  // Returns: OK, NotFound/IOError (the file), Corruption (not an .npy file,
  // malformed header, size mismatch), NotSupported (a dtype, order or
  // shape that cannot become samples).
  static Status Open(const std::string& path, std::unique_ptr<NpyRowReader>* reader);

  const std::string& path() const { return path_; }
  DType dtype() const { return dtype_; }
  const std::string& descr() const { return descr_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  // shape[0].
  uint64_t rows() const { return shape_[0]; }
  // shape[1:], as the value header stores it.
  const std::vector<int64_t>& row_shape() const { return row_shape_; }
  uint64_t row_bytes() const { return row_bytes_; }
  // Rows returned by ReadRow so far.
  uint64_t rows_read() const { return rows_read_; }

  // Reads the next row's bytes into *row (resized to row_bytes()).
  // REQUIRES: rows_read() < rows().
  // Returns: OK, IOError (naming the row and the offset).
  Status ReadRow(std::string* row);

 private:
  NpyRowReader() = default;

  std::string path_;
  std::FILE* file_ = nullptr;
  std::string descr_;
  DType dtype_ = DType::kBytes;
  std::vector<uint64_t> shape_;
  std::vector<int64_t> row_shape_;
  uint64_t row_bytes_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t rows_read_ = 0;
};

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_NPY_ROWS_H_
