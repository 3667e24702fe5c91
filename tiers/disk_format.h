// The disk tier's on-disk index format: the RocksDB keys and values that
// point at records in the segment files, and the segment files' names.
//
//   'i' + id (4 bytes, big-endian: ids iterate in order)
//        -> IndexValue (37 bytes, little-endian): sequence, segment number,
//           offset, length, CRC, codec, meta/payload/stored lengths
//   'w' + segment number (big-endian) -> watermark: the end of the
//        segment's last indexed record (8 bytes)
//   'm' + key -> the store's own metadata (DiskTier::PutMeta)
//   'x' + id (big-endian) -> a record lost at an open: segment number (4),
//        offset (4), then why, in words (DiskTier::Verify lists these)
//   "format" -> "opt4store-disk-v1"; "n" -> next segment number;
//   "q" -> highest sequence
//   segment files: segments/NNNNNN.seg
// Internal to tiers/.
#ifndef OPT4STORE_TIERS_DISK_FORMAT_H_
#define OPT4STORE_TIERS_DISK_FORMAT_H_

#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "opt4store/plan.h"
#include "opt4store/status.h"
#include "tiers/segment.h"
#include "tiers/segment_reader.h"

namespace opt4store {

// Index entries: 'i' + id (big-endian, so that ids iterate in order).
constexpr char kIndexTag = 'i';
// Segments: 'w' + number -> watermark (end of the last indexed record).
constexpr char kSegmentTag = 'w';
// The store's own keys (PutMeta): 'm' + key.
constexpr char kUserTag = 'm';
// Records dropped at an open: 'x' + id (big-endian).
constexpr char kLostTag = 'x';
inline constexpr char kFormatKey[] = "format";
inline constexpr char kFormatValue[] = "opt4store-disk-v1";
inline constexpr char kNextSegmentKey[] = "n";
inline constexpr char kSequenceKey[] = "q";

inline void PutBE32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline uint32_t GetBE32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline void PutLE(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

inline std::string IndexKey(ItemId id) {
  std::string k(1, kIndexTag);
  PutBE32(&k, id);
  return k;
}
inline std::string LostKey(ItemId id) {
  std::string k(1, kLostTag);
  PutBE32(&k, id);
  return k;
}
inline std::string LostValue(uint32_t segment, uint32_t offset, const std::string& why) {
  std::string v;
  PutLE(&v, segment, 4);
  PutLE(&v, offset, 4);
  return v + why;
}
inline std::string SegmentKey(uint32_t number) {
  std::string k(1, kSegmentTag);
  PutBE32(&k, number);
  return k;
}
inline std::string Fixed64(uint64_t v) {
  std::string s;
  PutLE(&s, v, 8);
  return s;
}
inline bool ParseFixed64(const std::string& s, uint64_t* v) {
  if (s.size() != 8) return false;
  *v = GetLE(s.data(), 8);
  return true;
}

// An index entry: where the record is, and what its header says.
struct IndexValue {
  uint64_t sequence = 0;
  uint32_t segment = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
  uint8_t codec = 0;
  uint32_t meta_len = 0;
  uint32_t payload_len = 0;
  uint32_t stored_len = 0;
};
constexpr size_t kIndexValueSize = 37;

inline std::string EncodeIndexValue(const IndexValue& v) {
  std::string s;
  s.reserve(kIndexValueSize);
  PutLE(&s, v.sequence, 8);
  PutLE(&s, v.segment, 4);
  PutLE(&s, v.offset, 4);
  PutLE(&s, v.length, 4);
  PutLE(&s, v.crc, 4);
  PutLE(&s, v.codec, 1);
  PutLE(&s, v.meta_len, 4);
  PutLE(&s, v.payload_len, 4);
  PutLE(&s, v.stored_len, 4);
  return s;
}
inline bool DecodeIndexValue(const rocksdb::Slice& s, IndexValue* v) {
  if (s.size() != kIndexValueSize) return false;
  const char* p = s.data();
  v->sequence = GetLE(p, 8);
  v->segment = static_cast<uint32_t>(GetLE(p + 8, 4));
  v->offset = static_cast<uint32_t>(GetLE(p + 12, 4));
  v->length = static_cast<uint32_t>(GetLE(p + 16, 4));
  v->crc = static_cast<uint32_t>(GetLE(p + 20, 4));
  v->codec = static_cast<uint8_t>(p[24]);
  v->meta_len = static_cast<uint32_t>(GetLE(p + 25, 4));
  v->payload_len = static_cast<uint32_t>(GetLE(p + 29, 4));
  v->stored_len = static_cast<uint32_t>(GetLE(p + 33, 4));
  return true;
}
inline IndexValue MakeIndexValue(const RecordHeader& h, uint32_t segment, uint32_t offset) {
  IndexValue v;
  v.sequence = h.sequence;
  v.segment = segment;
  v.offset = offset;
  v.length = static_cast<uint32_t>(h.record_size());
  v.crc = h.crc;
  v.codec = static_cast<uint8_t>(h.codec);
  v.meta_len = h.meta_len;
  v.payload_len = h.payload_len;
  v.stored_len = h.stored_len;
  return v;
}

inline DiskRecordPlace PlaceOf(const IndexValue& v) {
  DiskRecordPlace p;
  p.segment = v.segment;
  p.offset = v.offset;
  p.length = v.length;
  p.crc = v.crc;
  return p;
}

inline Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  const std::string msg = what + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(msg);
  if (s.IsNoSpace()) return Status::NoSpace(msg);
  if (s.IsCorruption()) return Status::Corruption(msg);
  if (s.IsBusy()) return Status::Busy(msg);
  return Status::IOError(msg);
}

inline std::string SegmentName(uint32_t number) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06" PRIu32 ".seg", number);
  return buf;
}
inline bool ParseSegmentName(const std::string& name, uint32_t* number) {
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".seg") != 0) return false;
  uint64_t n = 0;
  for (size_t i = 0; i + 4 < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
    if (n > UINT32_MAX) return false;
  }
  *number = static_cast<uint32_t>(n);
  return n > 0;
}

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_DISK_FORMAT_H_
