// What the extension's translation units share: a Status thrown across
// pybind11 (core_module.cc turns it into opt4store's exception classes),
// the dtype table between value headers and ATen, and the sink that reads a
// value into a fresh tensor. Includes torch: for the extension only.
#ifndef OPT4STORE_BINDINGS_CORE_COMMON_H_
#define OPT4STORE_BINDINGS_CORE_COMMON_H_

#include <pybind11/pybind11.h>
#include <torch/extension.h>

#include <cstdint>
#include <string>

#include "opt4store/read_sink.h"
#include "opt4store/status.h"
#include "opt4store/value.h"

namespace opt4store {

// Carries a Status across pybind11's C++ exception boundary.
struct StatusError {
  Status status;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}

bool ToScalar(DType dtype, at::ScalarType* scalar);
bool FromScalar(at::ScalarType scalar, DType* dtype);

// Allocates the payload as a fresh uint8 tensor; meta into a string. ATen
// allocation needs no GIL, so this runs with the GIL released.
class TensorSink : public ReadSink {
 public:
  Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                 void** payload_dst) override;
  std::string meta;
  at::Tensor payload;
};

// What Store.get returns for a value read into `sink`: a tensor for a tag-1
// value (rebuilt from its header); else (tag, meta bytes, uint8 payload
// tensor) for Python to decode (tag 0: bytes this package did not write).
pybind11::object ValueObject(const TensorSink& sink);

}  // namespace opt4store

#endif  // OPT4STORE_BINDINGS_CORE_COMMON_H_
