// The segment record format: round trips, CRC checks, and the LZ4 rule
// (compress only when it saves at least 10%).
#include "tiers/segment.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "tiers/crc32c.h"

namespace opt4store {
namespace {

std::string Noise(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// The record as it would be written: header + meta, then the stored payload.
std::string Bytes(const EncodedRecord& rec) {
  std::string out = rec.head;
  out.append(rec.body.data(), rec.body.size());
  return out;
}

std::string Encode(ItemId id, uint64_t seq, const std::string& meta, const std::string& payload,
                   bool lz4, RecordHeader* header = nullptr) {
  EncodedRecord rec;
  EncodeRecord(id, meta, payload, lz4, &rec);
  SealRecord(seq, &rec);
  if (header) *header = rec.header;
  return Bytes(rec);
}

}  // namespace

TEST_CASE("segment: a record round-trips its id, sequence, meta and payload", "[segment]") {
  const std::string meta = "dtype=uint8;shape=3,32,32;label=7";
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{100000}}) {
    for (bool lz4 : {false, true}) {
      const std::string payload = Noise(n, static_cast<uint32_t>(n));
      RecordHeader written;
      const std::string bytes = Encode(42, 1000 + n, meta, payload, lz4, &written);
      REQUIRE(bytes.size() == written.record_size());
      REQUIRE(bytes.size() == kRecordHeaderSize + meta.size() + written.stored_len);

      std::string m, p;
      RecordHeader h;
      REQUIRE(DecodeRecord(bytes.data(), bytes.size(), 42, &m, &p, &h).ok());
      CHECK(m == meta);
      CHECK(p == payload);
      CHECK(h.id == 42);
      CHECK(h.sequence == 1000 + n);
      CHECK(h.payload_len == n);
      CHECK(h.crc == written.crc);
    }
  }
}

TEST_CASE("segment: the header layout is the documented one", "[segment]") {
  const std::string bytes = Encode(0x01020304, 0x1122334455667788ull, "mm", "payload", false);
  CHECK(bytes.substr(0, 4) == std::string("O4SR"));
  CHECK(static_cast<uint8_t>(bytes[12]) == kRecordVersion);
  CHECK(static_cast<uint8_t>(bytes[13]) == 0);  // raw
  CHECK(static_cast<uint8_t>(bytes[16]) == 0x88);  // sequence, little-endian
  CHECK(static_cast<uint8_t>(bytes[24]) == 0x04);  // id, little-endian
  CHECK(static_cast<uint8_t>(bytes[28]) == 2);     // meta_len
  CHECK(static_cast<uint8_t>(bytes[32]) == 7);     // payload_len
  CHECK(bytes.substr(40) == "mmpayload");
  // The CRC covers everything after itself.
  uint32_t crc = 0;
  for (int i = 3; i >= 0; --i) crc = (crc << 8) | static_cast<uint8_t>(bytes[4 + i]);
  CHECK(crc == crc32c::Value(bytes.data() + 8, bytes.size() - 8));
}

TEST_CASE("segment: the CRC catches every single flipped bit", "[segment]") {
  const std::string good = Encode(9, 77, "meta", Noise(300, 1), false);
  std::string m, p;
  REQUIRE(DecodeRecord(good.data(), good.size(), 9, &m, &p).ok());
  for (size_t byte = 0; byte < good.size(); ++byte) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string bad = good;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      const Status s = DecodeRecord(bad.data(), bad.size(), 9, &m, &p);
      INFO("byte " << byte << " bit " << bit);
      REQUIRE(s.IsCorruption());
    }
  }
}

TEST_CASE("segment: a wrong id, a truncated record and garbage are Corruption", "[segment]") {
  const std::string good = Encode(9, 77, "meta", "hello world", false);
  RecordHeader h;
  CHECK(VerifyRecord(good.data(), good.size(), 10, &h).IsCorruption());
  CHECK(VerifyRecord(good.data(), good.size() - 1, 9, &h).IsCorruption());
  CHECK(DecodeRecordHeader(good.data(), 20, &h).IsCorruption());
  const std::string zeros(100, '\0');
  CHECK(DecodeRecordHeader(zeros.data(), zeros.size(), &h).IsCorruption());
  const std::string noise = Noise(100, 5);
  CHECK(DecodeRecordHeader(noise.data(), noise.size(), &h).IsCorruption());
}

TEST_CASE("segment: LZ4 is used only when it saves at least 10%", "[segment]") {
  RecordHeader h;
  // Noisy bytes (decoded pixels with sensor noise) do not compress: raw.
  Encode(1, 1, "", Noise(128 * 1024, 3), true, &h);
  CHECK(h.codec == Codec::kNone);
  CHECK(h.stored_len == 128 * 1024);

  // Zeros compress enormously.
  Encode(2, 2, "", std::string(128 * 1024, '\0'), true, &h);
  CHECK(h.codec == Codec::kLz4);
  CHECK(h.stored_len < 1024);

  // Compression off: stored raw whatever the content.
  Encode(3, 3, "", std::string(4096, '\0'), false, &h);
  CHECK(h.codec == Codec::kNone);

  // Around the threshold: a payload that is a fraction f noise, the rest
  // zeros, shrinks to about f. 95% noise saves < 10%: raw; 80% noise: LZ4.
  const size_t n = 64 * 1024;
  std::string mostly_noise = Noise(n, 4);
  std::fill(mostly_noise.begin(), mostly_noise.begin() + n / 20, '\0');
  Encode(4, 4, "", mostly_noise, true, &h);
  CHECK(h.codec == Codec::kNone);
  std::string some_zeros = Noise(n, 4);
  std::fill(some_zeros.begin(), some_zeros.begin() + n / 5, '\0');
  Encode(5, 5, "", some_zeros, true, &h);
  CHECK(h.codec == Codec::kLz4);
  CHECK(h.stored_len <= n * 9 / 10);

  // And whatever the codec, the payload comes back.
  std::string p;
  const std::string bytes = Encode(5, 5, "m", some_zeros, true);
  REQUIRE(DecodeRecord(bytes.data(), bytes.size(), 5, nullptr, &p).ok());
  CHECK(p == some_zeros);
}

TEST_CASE("segment: a corrupt LZ4 block with a matching CRC is still rejected", "[segment]") {
  // Rewrite the stored bytes and re-seal: the CRC is right, the block is not.
  EncodedRecord rec;
  const std::string zeros(8192, '\0');
  EncodeRecord(1, "", zeros, true, &rec);
  REQUIRE(rec.header.codec == Codec::kLz4);
  rec.compressed.assign(rec.compressed.size(), '\xFF');
  rec.body = rec.compressed;
  SealRecord(1, &rec);
  const std::string bytes = Bytes(rec);
  std::string p;
  CHECK(DecodeRecord(bytes.data(), bytes.size(), 1, nullptr, &p).IsCorruption());
}

}  // namespace opt4store
