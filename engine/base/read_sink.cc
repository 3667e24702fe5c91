#include "opt4store/read_sink.h"

#include <cstring>

namespace opt4store {

Status StringSink::Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                           void** payload_dst) {
  meta.resize(meta_size);
  payload.resize(payload_size);
  *meta_dst = meta.data();
  *payload_dst = payload.data();
  return Status::OK();
}

void CopyPayload(const ReadSink& sink, void* payload_dst, const void* src, uint64_t size) {
  if (size == 0) return;
  if (payload_dst != nullptr) {
    std::memcpy(payload_dst, src, size);
    return;
  }
  const std::vector<ReadSink::Piece>* pieces = sink.pieces();
  if (pieces == nullptr) return;
  for (const ReadSink::Piece& piece : *pieces) {
    if (piece.offset >= size || piece.length == 0) continue;
    const uint64_t length = piece.length < size - piece.offset ? piece.length : size - piece.offset;
    std::memcpy(piece.dst, static_cast<const char*>(src) + piece.offset, length);
  }
}

}  // namespace opt4store
