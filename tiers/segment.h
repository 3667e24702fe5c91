// The record format of the disk tier's segment files.
//
// A segment (dir/segments/000001.seg, ...) is a sequence of records, back to
// back, unpadded. A record is a 40-byte header, the item's meta blob, then
// its payload, stored raw or as one LZ4 block:
//
//   offset size  field
//    0     4     magic      0x5253344F ("O4SR" on disk)
//    4     4     crc        CRC32C of bytes [8, end of record)
//    8     4     header_crc CRC32C of bytes [12, 40): lets a recovery scan
//                           trust the lengths before it reads the body
//   12     1     version    1
//   13     1     codec      0 raw, 1 LZ4
//   14     2     flags      0
//   16     8     sequence   increases with every record written; during
//                           recovery the newest version of an id wins
//   24     4     id
//   28     4     meta_len   <= kMaxMetaBytes
//   32     4     payload_len  the payload's size before compression
//   36     4     stored_len   the payload's size in the file
//   40           meta, then the stored payload
//
// Integers are little-endian. A record does not know where it lives, so
// compaction copies records verbatim.
//
// LZ4 is used only where it pays: the payload is stored compressed only when
// that saves at least 10% (stored_len <= 0.9 * payload_len). Noisy decoded
// pixels barely shrink (ratio ~1.03) and would cost a decompression per read
// for nothing. Payloads of 64 KiB and more are probed first (16 KiB sampled
// across the payload must save 10% as well), so that such data costs a
// small probe per Put rather than a full failed compression.
//
// Thread safety: pure functions.
#ifndef OPT4STORE_TIERS_SEGMENT_H_
#define OPT4STORE_TIERS_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "opt4store/plan.h"
#include "opt4store/status.h"
#include "opt4store/value.h"

namespace opt4store {

constexpr uint32_t kRecordMagic = 0x5253344F;
constexpr uint8_t kRecordVersion = 1;
constexpr size_t kRecordHeaderSize = 40;
// kMaxMetaBytes (64 KiB) comes from opt4store/value.h: one limit for the store and the records.
// Records are addressed with 32-bit lengths.
constexpr uint64_t kMaxRecordBytes = UINT32_MAX;

enum class Codec : uint8_t { kNone = 0, kLz4 = 1 };

struct RecordHeader {
  uint32_t crc = 0;
  Codec codec = Codec::kNone;
  uint64_t sequence = 0;
  ItemId id = 0;
  uint32_t meta_len = 0;
  uint32_t payload_len = 0;
  uint32_t stored_len = 0;

  uint64_t record_size() const { return kRecordHeaderSize + meta_len + stored_len; }
};

// A record ready to be written: the header with meta, then the payload (the
// caller's bytes when stored raw, else `compressed`), so that a raw payload
// is never copied before the write.
struct EncodedRecord {
  RecordHeader header;
  std::string head;        // header + meta
  std::string compressed;  // the LZ4 block when codec == kLz4
  std::string_view body;   // the stored payload: the caller's bytes or compressed

  uint64_t size() const { return head.size() + body.size(); }
};

// Chooses the codec: with try_lz4, compresses the payload and keeps the
// result only if it saves >= 10%. Leaves the header's sequence and CRCs to
// SealRecord, so that the (slow) compression can run outside a lock.
// REQUIRES: meta.size() <= kMaxMetaBytes; the record fits kMaxRecordBytes.
// *record keeps a view of payload when it is stored raw.
void EncodeRecord(ItemId id, std::string_view meta, std::string_view payload, bool try_lz4,
                  EncodedRecord* record);

// Writes the sequence number and both CRCs into record->head.
void SealRecord(uint64_t sequence, EncodedRecord* record);

// Parses and checks a header: magic, version, header CRC, lengths.
// Returns: OK, Corruption.
Status DecodeRecordHeader(const char* data, size_t n, RecordHeader* header);

// Checks a whole record (header and CRC) held in data[0, n): n must be at
// least the record's size. expected_id: the id the index says lives here.
// Returns: OK, Corruption.
Status VerifyRecord(const char* data, size_t n, ItemId expected_id, RecordHeader* header);

// VerifyRecord, then copies out the meta and the (decompressed) payload.
// Either output may be null. Returns: OK, Corruption.
Status DecodeRecord(const char* data, size_t n, ItemId expected_id, std::string* meta,
                    std::string* payload, RecordHeader* header = nullptr);

// VerifyRecord without copies: *meta views data; *payload views data when
// stored raw, else *scratch, which receives the decompressed payload.
// Returns: OK, Corruption.
Status DecodeRecordView(const char* data, size_t n, ItemId expected_id, std::string_view* meta,
                        std::string_view* payload, std::string* scratch,
                        RecordHeader* header = nullptr);

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_SEGMENT_H_
