// See core_common.h.
#include "bindings/core_common.h"

namespace opt4store {

// ---------------------------------------------------------------- dtypes

struct DTypePair {
  DType dtype;
  at::ScalarType scalar;
};

constexpr DTypePair kDTypePairs[] = {
    {DType::kBool, at::kBool},         {DType::kUInt8, at::kByte},
    {DType::kInt8, at::kChar},         {DType::kInt16, at::kShort},
    {DType::kInt32, at::kInt},         {DType::kInt64, at::kLong},
    {DType::kFloat16, at::kHalf},      {DType::kBFloat16, at::kBFloat16},
    {DType::kFloat32, at::kFloat},     {DType::kFloat64, at::kDouble},
    {DType::kComplex64, at::kComplexFloat}, {DType::kComplex128, at::kComplexDouble},
};

bool ToScalar(DType dtype, at::ScalarType* scalar) {
  for (const DTypePair& p : kDTypePairs) {
    if (p.dtype == dtype) {
      *scalar = p.scalar;
      return true;
    }
  }
  return false;
}

bool FromScalar(at::ScalarType scalar, DType* dtype) {
  for (const DTypePair& p : kDTypePairs) {
    if (p.scalar == scalar) {
      *dtype = p.dtype;
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------- sinks

Status TensorSink::Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                          void** payload_dst) {
  meta.resize(meta_size);
  if (!payload.defined() || static_cast<uint64_t>(payload.numel()) != payload_size) {
    payload = at::empty({static_cast<int64_t>(payload_size)}, at::kByte);
  }
  *meta_dst = meta.data();
  *payload_dst = payload.data_ptr();
  return Status::OK();
}

// The tensor a value header describes, as a view of the bytes.
namespace {

at::Tensor ViewAs(const at::Tensor& bytes, const ValueHeader& h) {
  at::ScalarType scalar;
  if (!ToScalar(h.dtype, &scalar)) return bytes;
  if (h.PayloadBytes() != static_cast<uint64_t>(bytes.numel())) {
    ThrowIfError(Status::Corruption("a value's header says " + std::to_string(h.PayloadBytes()) +
                                    " bytes, its payload has " + std::to_string(bytes.numel())));
  }
  at::Tensor t = scalar == at::kByte ? bytes : bytes.view(scalar);
  return t.view(h.shape);
}

}  // namespace

pybind11::object ValueObject(const TensorSink& sink) {
  namespace py = pybind11;
  ValueHeader h;
  if (!DecodeValueHeader(sink.meta, &h).ok()) {
    return py::make_tuple(0, py::bytes(sink.meta), sink.payload);
  }
  if (h.tag == 1) return py::cast(ViewAs(sink.payload, h));
  return py::make_tuple(h.tag, py::bytes(sink.meta), sink.payload);
}

}  // namespace opt4store
