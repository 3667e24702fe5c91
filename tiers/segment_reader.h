// Reading one record straight from a segment file, in a process that does
// not have the disk tier open: a reader process (a DataLoader worker, a
// local rank), given where the owner said the record is.
//
// Why it is safe without the tier's locks: a record, once written and
// indexed, is never changed in place (segments are append-only; compaction
// copies records to another segment and then deletes the old file), and a
// segment number is never reused for other bytes except after Clear or a
// failed append's roll-back, neither of which an indexed record survives.
// So a place that is out of date leads to a segment file that is gone
// (NotFound), or to bytes that are not the record named (Corruption: its
// id, its CRC32C or the CRC the place names differ), and never to a wrong
// value. A file deleted while it is open keeps its bytes for the reader.
//
// Thread safety: pure functions over a file descriptor opened per call.
#ifndef OPT4STORE_TIERS_SEGMENT_READER_H_
#define OPT4STORE_TIERS_SEGMENT_READER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

// Where a record lives: its segment's number (segments/NNNNNN.seg), its
// offset and length there, and its CRC32C (the record header's crc field),
// which names this very record: another version of the same id differs in
// its sequence number, and so in its CRC. segment 0: no place.
struct DiskRecordPlace {
  uint32_t segment = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
};

// Reads the record of `id` at `place` under segments_dir into *buffer and
// checks it (header, id, CRC32C of the whole record, and its CRC against
// place.crc). On OK, *meta views *buffer and *payload views *buffer (stored
// raw) or *scratch (LZ4, decompressed).
// Returns: OK, NotFound (no place, the segment file is gone or too short),
// Corruption (the bytes there are not that record, or fail their CRC),
// IOError.
Status ReadRecordAt(const std::string& segments_dir, ItemId id, const DiskRecordPlace& place,
                    std::string* buffer, std::string_view* meta, std::string_view* payload,
                    std::string* scratch);

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_SEGMENT_READER_H_
