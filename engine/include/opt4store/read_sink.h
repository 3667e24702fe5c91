// ReadSink: where a read puts an item's bytes. The store and the RAM tier
// ask the sink for the final destination (a tensor the Python binding has
// just allocated, a std::string, a caller's buffer) once they know the
// sizes, and copy there exactly once.
//
// Thread safety: a sink serves one read at a time, from one thread at a
// time. Get and Peek call it from the calling thread; GetBatch may call the
// sinks of one batch from its copy helpers, several at once (store.h), so
// sinks of a batch that share anything (an allocator) must lock it.
// Process-local.
#ifndef OPT4STORE_READ_SINK_H_
#define OPT4STORE_READ_SINK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "opt4store/status.h"

namespace opt4store {

class ReadSink {
 public:
  virtual ~ReadSink() = default;
  // Returns destinations of at least meta_size and payload_size bytes (a
  // pointer may be null when its size is 0). A non-OK status aborts the
  // read. If the item changes during a copy, the reader calls Prepare()
  // again, maybe with other sizes, and copies again; the sink must accept
  // that.
  virtual Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                         void** payload_dst) = 0;

  // A sink may take the payload in pieces instead (a batch loader puts each
  // leaf of a sample into its own batch tensor, copying once): Prepare sets
  // *payload_dst to nullptr, and pieces() lists where each byte range of
  // the payload goes; bytes in no piece are dropped. Valid until the next
  // Prepare. Default: none (the payload goes whole to *payload_dst).
  struct Piece {
    uint64_t offset = 0;  // in the payload
    uint64_t length = 0;
    void* dst = nullptr;
  };
  virtual const std::vector<Piece>* pieces() const { return nullptr; }
};

// Copies a payload of `size` bytes from src to where `sink` asked for it
// (payload_dst, or its pieces when payload_dst is nullptr). Pieces that
// reach past `size` get the bytes there are. For the tiers' copy-outs.
void CopyPayload(const ReadSink& sink, void* payload_dst, const void* src, uint64_t size);

// A sink into two std::strings (tests, tools). Not thread-safe.
class StringSink : public ReadSink {
 public:
  Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                 void** payload_dst) override;
  std::string meta;
  std::string payload;
};

}  // namespace opt4store

#endif  // OPT4STORE_READ_SINK_H_
