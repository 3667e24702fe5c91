// NpyHeader: the header of a NumPy .npy file, the one reader (and writer)
// of it for the number files (plans and sizes, number_file.h) and for the
// CLI's import of array rows (tools/npy_rows.h).
//
// The format (numpy.lib.format, versions 1.0 to 3.0): the magic
// "\x93NUMPY", a major and a minor version byte, the length of the header
// text (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0), then the header
// text: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ended by a newline. The array's bytes follow it.
//
// What is read here is the framing and the dict's syntax, and checked is the
// file's size against the shape. What a dtype or a rank means is each
// reader's own check: number files take four integer dtypes and 1-D or 2-D
// arrays, the import takes any numeric dtype and rank. Every error names the
// file, and the byte offset where the framing goes wrong.
//
// Thread safety: plain functions over a plain struct.
#ifndef OPT4STORE_ENGINE_BASE_NPY_HEADER_H_
#define OPT4STORE_ENGINE_BASE_NPY_HEADER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "opt4store/status.h"

namespace opt4store {

struct NpyHeader {
  int major_version = 0;  // 1, 2 or 3
  // The dtype as written, e.g. "<f4", "|u1"; a structured dtype's list of
  // fields is kept whole as text, e.g. "[('x', '<f4'), ('y', '<i2')]".
  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;  // () for a 0-d array
  uint64_t data_offset = 0;     // where the array's bytes start in the file
};

// Parses the header's dict text into descr, fortran_order and shape (the
// other fields are left alone). Checks the syntax only: keys in any order,
// quotes ' or ", Python 2's "3L" in a shape.
// Returns: OK; Corruption "malformed .npy header at character N: ..." or
// "the .npy header lacks 'shape'" (or another of the three keys).
Status ParseNpyHeaderDict(const std::string& text, NpyHeader* header);

// Reads the header from the start of file, which was opened on path (named
// in messages), and leaves the file at header->data_offset.
// Returns: OK; Corruption (no magic at offset 0, a truncated header naming
// its offset, an implausible header length, a malformed dict); NotSupported
// (a format version other than 1.0 to 3.0).
Status ReadNpyHeader(const std::string& path, std::FILE* file, NpyHeader* header);

// The array's size in bytes: the product of the shape times item_size
// (1 for a 0-d array).
// Returns: OK; Corruption when that overflows 64 bits.
Status NpyDataBytes(const std::string& path, const NpyHeader& header, uint64_t item_size,
                    uint64_t* bytes);

// Checks that a file of file_size bytes holds exactly the array the header
// describes, elements of item_size bytes from data_offset on.
// Returns: OK; Corruption naming both sizes and the offset where they part
// (or an overflowing shape).
Status CheckNpyFileSize(const std::string& path, const NpyHeader& header, uint64_t item_size,
                        uint64_t file_size);

// A version 1.0 header for a C-order array of descr and shape, as numpy
// writes it: the dict padded with spaces so that the array's bytes start at
// a multiple of 64.
// REQUIRES: the dict fits in 65535 bytes (a short descr and shape do).
std::string EncodeNpyHeader(const std::string& descr, const std::vector<uint64_t>& shape);

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BASE_NPY_HEADER_H_
