#include "tiers/segment.h"

#include <lz4.h>

#include <cstring>

#include "tiers/crc32c.h"

namespace opt4store {

namespace {

void Put32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
void Put64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
uint32_t Get32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t Get64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// LZ4 must save at least this fraction of the payload to be used.
constexpr double kMinSavings = 0.10;

// Payloads this large are probed first: LZ4 runs at ~200 MB/s on data that
// almost compresses (decoded pixels with a little noise) and only finds out
// at the end. kProbeChunks chunks from across the payload, compressed
// together, must save 10% too, or the payload is stored raw untried.
constexpr size_t kProbeMinPayload = 64 * 1024;
constexpr size_t kProbeChunk = 4096;
constexpr size_t kProbeChunks = 4;

bool ProbeSaves(std::string_view payload, std::string* scratch) {
  if (payload.size() < kProbeMinPayload) return true;
  char probe[kProbeChunks * kProbeChunk];
  const size_t stride = (payload.size() - kProbeChunk) / (kProbeChunks - 1);
  for (size_t i = 0; i < kProbeChunks; ++i) {
    std::memcpy(probe + i * kProbeChunk, payload.data() + i * stride, kProbeChunk);
  }
  const size_t limit = static_cast<size_t>(sizeof(probe) * (1 - kMinSavings));
  scratch->resize(limit);
  return LZ4_compress_default(probe, scratch->data(), static_cast<int>(sizeof(probe)),
                              static_cast<int>(limit)) > 0;
}

}  // namespace

void EncodeRecord(ItemId id, std::string_view meta, std::string_view payload, bool try_lz4,
                  EncodedRecord* record) {
  RecordHeader& h = record->header;
  h = RecordHeader();
  h.id = id;
  h.meta_len = static_cast<uint32_t>(meta.size());
  h.payload_len = static_cast<uint32_t>(payload.size());
  h.codec = Codec::kNone;
  record->body = payload;
  record->compressed.clear();
  // The output buffer holds exactly the largest size worth keeping, so LZ4
  // gives up as soon as the block would not save 10%.
  const size_t limit =
      static_cast<size_t>(static_cast<double>(payload.size()) * (1 - kMinSavings));
  if (try_lz4 && limit > 0 && payload.size() <= LZ4_MAX_INPUT_SIZE &&
      ProbeSaves(payload, &record->compressed)) {
    record->compressed.resize(limit);
    const int n = LZ4_compress_default(payload.data(), record->compressed.data(),
                                       static_cast<int>(payload.size()), static_cast<int>(limit));
    if (n > 0) {
      record->compressed.resize(static_cast<size_t>(n));
      record->body = record->compressed;
      h.codec = Codec::kLz4;
    } else {
      record->compressed.clear();
    }
  }
  h.stored_len = static_cast<uint32_t>(record->body.size());
  record->head.assign(kRecordHeaderSize, '\0');
  record->head.append(meta.data(), meta.size());
}

void SealRecord(uint64_t sequence, EncodedRecord* record) {
  RecordHeader& h = record->header;
  h.sequence = sequence;
  char* p = record->head.data();
  Put32(p + 0, kRecordMagic);
  p[12] = static_cast<char>(kRecordVersion);
  p[13] = static_cast<char>(h.codec);
  p[14] = p[15] = 0;
  Put64(p + 16, h.sequence);
  Put32(p + 24, h.id);
  Put32(p + 28, h.meta_len);
  Put32(p + 32, h.payload_len);
  Put32(p + 36, h.stored_len);
  Put32(p + 8, crc32c::Value(p + 12, kRecordHeaderSize - 12));
  uint32_t crc = crc32c::Value(p + 8, record->head.size() - 8);
  crc = crc32c::Extend(crc, record->body.data(), record->body.size());
  Put32(p + 4, crc);
  h.crc = crc;
}

Status DecodeRecordHeader(const char* data, size_t n, RecordHeader* h) {
  if (n < kRecordHeaderSize) return Status::Corruption("record header truncated");
  if (Get32(data) != kRecordMagic) return Status::Corruption("bad record magic");
  if (Get32(data + 8) != crc32c::Value(data + 12, kRecordHeaderSize - 12)) {
    return Status::Corruption("record header checksum mismatch");
  }
  if (static_cast<uint8_t>(data[12]) != kRecordVersion) {
    return Status::Corruption("unknown record version " +
                              std::to_string(static_cast<uint8_t>(data[12])));
  }
  const uint8_t codec = static_cast<uint8_t>(data[13]);
  if (codec > static_cast<uint8_t>(Codec::kLz4)) {
    return Status::Corruption("unknown record codec " + std::to_string(codec));
  }
  h->crc = Get32(data + 4);
  h->codec = static_cast<Codec>(codec);
  h->sequence = Get64(data + 16);
  h->id = Get32(data + 24);
  h->meta_len = Get32(data + 28);
  h->payload_len = Get32(data + 32);
  h->stored_len = Get32(data + 36);
  if (h->meta_len > kMaxMetaBytes) return Status::Corruption("record meta too long");
  if (h->codec == Codec::kNone && h->stored_len != h->payload_len) {
    return Status::Corruption("raw record with stored_len != payload_len");
  }
  if (h->record_size() > kMaxRecordBytes) return Status::Corruption("record too long");
  return Status::OK();
}

Status VerifyRecord(const char* data, size_t n, ItemId expected_id, RecordHeader* h) {
  OPT4STORE_RETURN_IF_ERROR(DecodeRecordHeader(data, n, h));
  if (h->id != expected_id) {
    return Status::Corruption("record holds id " + std::to_string(h->id) + ", expected " +
                              std::to_string(expected_id));
  }
  if (n < h->record_size()) return Status::Corruption("record truncated");
  const uint32_t crc = crc32c::Value(data + 8, h->record_size() - 8);
  if (crc != h->crc) return Status::Corruption("record checksum mismatch");
  return Status::OK();
}

namespace {

// Decompresses an LZ4 payload into out. Returns: OK, Corruption.
Status Decompress(const char* body, const RecordHeader& h, std::string* out) {
  out->resize(h.payload_len);
  const int got = LZ4_decompress_safe(body, out->data(), static_cast<int>(h.stored_len),
                                      static_cast<int>(h.payload_len));
  if (got < 0 || static_cast<uint32_t>(got) != h.payload_len) {
    out->clear();
    return Status::Corruption("LZ4 block does not decode to payload_len bytes");
  }
  return Status::OK();
}

}  // namespace

Status DecodeRecord(const char* data, size_t n, ItemId expected_id, std::string* meta,
                    std::string* payload, RecordHeader* header) {
  RecordHeader local;
  RecordHeader* h = header ? header : &local;
  OPT4STORE_RETURN_IF_ERROR(VerifyRecord(data, n, expected_id, h));
  const char* m = data + kRecordHeaderSize;
  const char* body = m + h->meta_len;
  if (meta) meta->assign(m, h->meta_len);
  if (payload == nullptr) return Status::OK();
  if (h->codec == Codec::kNone) {
    payload->assign(body, h->stored_len);
    return Status::OK();
  }
  return Decompress(body, *h, payload);
}

Status DecodeRecordView(const char* data, size_t n, ItemId expected_id, std::string_view* meta,
                        std::string_view* payload, std::string* scratch, RecordHeader* header) {
  RecordHeader local;
  RecordHeader* h = header ? header : &local;
  OPT4STORE_RETURN_IF_ERROR(VerifyRecord(data, n, expected_id, h));
  const char* m = data + kRecordHeaderSize;
  const char* body = m + h->meta_len;
  *meta = std::string_view(m, h->meta_len);
  if (h->codec == Codec::kNone) {
    *payload = std::string_view(body, h->stored_len);
    return Status::OK();
  }
  OPT4STORE_RETURN_IF_ERROR(Decompress(body, *h, scratch));
  *payload = *scratch;
  return Status::OK();
}

}  // namespace opt4store
