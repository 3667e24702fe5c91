#include "opt4store/value.h"

#include <algorithm>
#include <cstring>

#include "engine/base/checked_math.h"

namespace opt4store {
namespace {

constexpr char kValueMagic = 'o';
constexpr uint8_t kFormatVersion = 1;
constexpr size_t kMaxDims = 32;

struct DTypeInfo {
  DType dtype;
  const char* name;
  const char* numpy;  // array-interface code, little-endian
  uint64_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBytes, "bytes", "|V1", 1},      {DType::kBool, "bool", "|b1", 1},
    {DType::kUInt8, "uint8", "|u1", 1},      {DType::kInt8, "int8", "|i1", 1},
    {DType::kInt16, "int16", "<i2", 2},      {DType::kInt32, "int32", "<i4", 4},
    {DType::kInt64, "int64", "<i8", 8},      {DType::kFloat16, "float16", "<f2", 2},
    {DType::kBFloat16, "bfloat16", "", 2},   {DType::kFloat32, "float32", "<f4", 4},
    {DType::kFloat64, "float64", "<f8", 8},  {DType::kComplex64, "complex64", "<c8", 8},
    {DType::kComplex128, "complex128", "<c16", 16}, {DType::kUInt16, "uint16", "<u2", 2},
    {DType::kUInt32, "uint32", "<u4", 4},    {DType::kUInt64, "uint64", "<u8", 8},
};

const DTypeInfo* Find(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

}  // namespace

const char* DTypeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info == nullptr ? "unknown" : info->name;
}

uint64_t DTypeSize(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info == nullptr ? 0 : info->size;
}

Status ParseDType(std::string_view name, DType* dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name || (info.numpy[0] != '\0' && name == info.numpy)) {
      *dtype = info.dtype;
      return Status::OK();
    }
    // numpy writes one-byte types with '|', but '<' and '=' mean the same there.
    if (info.size == 1 && info.numpy[0] == '|' && name.size() == 3 &&
        (name[0] == '<' || name[0] == '=') && name.substr(1) == std::string_view(info.numpy + 1)) {
      *dtype = info.dtype;
      return Status::OK();
    }
  }
  if (!name.empty() && name[0] == '>') {
    return Status::InvalidArgument("big-endian dtype '" + std::string(name) +
                                   "' is not supported; convert the array to little-endian");
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) + "'");
}

uint64_t ValueHeader::NumElements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= d < 0 ? 0 : static_cast<uint64_t>(d);
  return n;
}

uint64_t ValueHeader::PayloadBytes() const { return NumElements() * DTypeSize(dtype); }

std::string EncodeValueHeader(const ValueHeader& header) {
  std::string out;
  out.reserve(8 + 8 * header.shape.size() + header.user.size());
  out.push_back(kValueMagic);
  out.push_back(static_cast<char>(kFormatVersion));
  out.push_back(static_cast<char>(header.dtype));
  out.push_back(static_cast<char>(header.shape.size()));
  char word[8];
  std::memcpy(word, &header.tag, 4);
  out.append(word, 4);
  for (int64_t d : header.shape) {
    std::memcpy(word, &d, 8);
    out.append(word, 8);
  }
  out.append(header.user);
  return out;
}

Status DecodeValueHeader(std::string_view meta, ValueHeader* header) {
  if (meta.size() < 8 || meta[0] != kValueMagic) {
    return Status::Corruption("value header: not an opt4store value header (" +
                              std::to_string(meta.size()) + " bytes)");
  }
  if (static_cast<uint8_t>(meta[1]) != kFormatVersion) {
    return Status::Corruption("value header: unknown format version " +
                              std::to_string(static_cast<uint8_t>(meta[1])));
  }
  const auto dtype = static_cast<DType>(static_cast<uint8_t>(meta[2]));
  if (Find(dtype) == nullptr) {
    return Status::Corruption("value header: unknown dtype code " +
                              std::to_string(static_cast<uint8_t>(meta[2])));
  }
  const size_t ndim = static_cast<uint8_t>(meta[3]);
  if (ndim > kMaxDims || meta.size() < 8 + 8 * ndim) {
    return Status::Corruption("value header: " + std::to_string(ndim) +
                              " dimensions do not fit in " + std::to_string(meta.size()) +
                              " bytes");
  }
  header->dtype = dtype;
  std::memcpy(&header->tag, meta.data() + 4, 4);
  header->shape.resize(ndim);
  for (size_t i = 0; i < ndim; ++i) std::memcpy(&header->shape[i], meta.data() + 8 + 8 * i, 8);
  // The shape comes from a file: its byte count must not wrap around into
  // one that matches a short payload.
  // (A zero dimension makes any shape empty.)
  uint64_t bytes = DTypeSize(dtype);
  const bool empty = std::find(header->shape.begin(), header->shape.end(), 0) != header->shape.end();
  for (int64_t d : header->shape) {
    if (d < 0 || (!empty && !CheckedMul(bytes, static_cast<uint64_t>(d), &bytes))) {
      return Status::Corruption("value header: shape dimension " + std::to_string(d) +
                                (d < 0 ? " is negative" : " overflows the value's 64-bit size"));
    }
  }
  header->user.assign(meta.substr(8 + 8 * ndim));
  return Status::OK();
}

}  // namespace opt4store
