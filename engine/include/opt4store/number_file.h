// NumberFile: files of non-negative integers, the on-disk form of plans
// (one id per read) and of item sizes (one size per id).
//
// Formats, chosen by the file name's extension:
//   .u32 / .u64   raw little-endian unsigned integers, nothing else
//   .npy          NumPy format 1.0-3.0, C order, 1-D or 2-D, dtype int32,
//                 int64, uint32 or uint64, little-endian. A 2-D array's rows
//                 are epochs.
//   anything else text: one integer per line; blank lines and lines starting
//                 with '#' are skipped; surrounding spaces are ignored.
// Errors name the file and the offending line (text) or byte offset (binary).
//
// Thread safety: a NumberFileReader is not thread-safe.
#ifndef OPT4STORE_NUMBER_FILE_H_
#define OPT4STORE_NUMBER_FILE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/status.h"

namespace opt4store {

enum class NumberFormat { kText, kU32, kU64, kNpy };

const char* NumberFormatName(NumberFormat format);
// "txt", "u32", "u64", "npy".
Status ParseNumberFormat(std::string_view name, NumberFormat* format);
// By extension: .u32, .u64, .npy, else text.
NumberFormat NumberFormatFromPath(const std::string& path);

// Streams the values of a file in order.
class NumberFileReader {
 public:
  ~NumberFileReader();
  NumberFileReader(const NumberFileReader&) = delete;
  NumberFileReader& operator=(const NumberFileReader&) = delete;

  // Opens path. For .npy the header is parsed and checked here.
  static Status Open(const std::string& path, std::unique_ptr<NumberFileReader>* reader);

  NumberFormat format() const { return format_; }
  // Rows of a 2-D .npy file, else 0.
  uint64_t npy_rows() const { return npy_rows_; }
  // Number of values, known up front for binary formats; 0 for text.
  uint64_t binary_count() const { return binary_count_; }

  // Reads up to max values. *count == 0 at the end. A value above max_value
  // (or a malformed one) is an error naming its line or offset.
  Status Read(uint64_t* out, size_t max, size_t* count, uint64_t max_value = UINT64_MAX);

 private:
  NumberFileReader() = default;
  Status ReadText(uint64_t* out, size_t max, size_t* count, uint64_t max_value);
  Status ReadBinary(uint64_t* out, size_t max, size_t* count, uint64_t max_value);

  std::string path_;
  std::FILE* file_ = nullptr;
  NumberFormat format_ = NumberFormat::kText;
  int width_ = 8;          // bytes per binary value
  bool signed_ = false;    // npy int32/int64
  uint64_t data_offset_ = 0;
  uint64_t binary_count_ = 0;
  uint64_t npy_rows_ = 0;
  uint64_t consumed_ = 0;  // values returned so far
  uint64_t line_ = 0;      // text: current line number
  std::vector<char> buffer_;
};

// Scans a whole file once: count, max value and the first error, if any.
struct NumberFileSummary {
  uint64_t count = 0;
  uint64_t max_value = 0;
  uint64_t npy_rows = 0;
  NumberFormat format = NumberFormat::kText;
};
Status SummarizeNumberFile(const std::string& path, uint64_t max_value,
                           NumberFileSummary* summary);

// Reads a whole file into memory.
Status ReadNumberFile(const std::string& path, uint64_t max_value, std::vector<uint64_t>* values);

// Writes values; the file is written to path.tmp and renamed, so a reader
// never sees half a file. For kNpy, `rows` > 0 writes a 2-D array of
// rows x (values / rows), and the dtype is int64 (what torch samplers yield).
class NumberFileWriter {
 public:
  ~NumberFileWriter();
  NumberFileWriter(const NumberFileWriter&) = delete;
  NumberFileWriter& operator=(const NumberFileWriter&) = delete;

  // total: the number of values that will be appended (needed for .npy).
  static Status Open(const std::string& path, NumberFormat format, uint64_t total,
                     uint64_t rows, std::unique_ptr<NumberFileWriter>* writer);
  Status Append(const uint64_t* values, size_t count);
  // Flushes, syncs and renames into place. REQUIRES: exactly `total` appended.
  Status Finish();

 private:
  NumberFileWriter() = default;
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  NumberFormat format_ = NumberFormat::kText;
  uint64_t total_ = 0;
  uint64_t written_ = 0;
  std::string scratch_;
};

}  // namespace opt4store

#endif  // OPT4STORE_NUMBER_FILE_H_
