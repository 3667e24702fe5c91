// The typed header of a stored value. A value is two blobs: `meta`, a small
// header (at most kMaxMetaBytes), and `payload`, the sample's bytes. The
// store treats both as opaque; this header is the convention the CLI and the
// bindings use for meta, so that a sample can be rebuilt as a tensor.
//
// Encoding (little-endian), 8 + 8 x ndim bytes plus the user bytes:
//   u8 'o', u8 format version (1), u8 dtype, u8 ndim, u32 tag,
//   i64 shape[ndim], then `user` to the end.
#ifndef OPT4STORE_VALUE_H_
#define OPT4STORE_VALUE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/status.h"

namespace opt4store {

// The most meta bytes a value may carry (the disk tier's record limit).
constexpr uint64_t kMaxMetaBytes = 64 * 1024;

enum class DType : uint8_t {
  kBytes = 0,  // raw bytes; shape is {size}
  kBool,
  kUInt8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kComplex64,
  kComplex128,
  kUInt16,
  kUInt32,
  kUInt64,
};

// "uint8", "float32", ...; "bytes" for kBytes.
const char* DTypeName(DType dtype);
// Accepts DTypeName's names and numpy's array-interface codes ("<u1", "|b1",
// "<f4", ...; big-endian codes are InvalidArgument).
Status ParseDType(std::string_view name, DType* dtype);
uint64_t DTypeSize(DType dtype);

// The tags the Python package gives the values it stores (its _values.py
// TAG_* names the same numbers): what `opt4store get --meta` describes.
enum PythonTag : uint32_t {
  kPythonTensor = 1,  // a torch tensor
  kPythonArray = 2,   // a numpy array
  kPythonStruct = 3,  // tuples, lists, dicts of leaves; user: the pickled skeleton
  kPythonPickle = 4,  // any other object, pickled whole as the payload
};

struct ValueHeader {
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;  // at most 32 dimensions
  uint32_t tag = 0;            // the caller's; 0 unless set
  std::string user;            // the caller's (a file name, a pickled label)

  // Elements in the shape (1 for a scalar, shape {}).
  uint64_t NumElements() const;
  // NumElements() * DTypeSize(dtype).
  uint64_t PayloadBytes() const;
};

std::string EncodeValueHeader(const ValueHeader& header);
// Returns Corruption for bytes that are not a header this version wrote.
Status DecodeValueHeader(std::string_view meta, ValueHeader* header);

}  // namespace opt4store

#endif  // OPT4STORE_VALUE_H_
