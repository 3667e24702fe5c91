#include "opt4store/read_sink.h"

namespace opt4store {

Status StringSink::Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                           void** payload_dst) {
  meta.resize(meta_size);
  payload.resize(payload_size);
  *meta_dst = meta.data();
  *payload_dst = payload.data();
  return Status::OK();
}

}  // namespace opt4store
