// disk_test_util.h: helpers shared by the disk tier's tests: deterministic
// item values (a function of id and version, so that a reader can tell a
// right value from a wrong one without a copy), and a raw walk over a
// segment file's records, to find the bytes to damage.
//
// Header-only.
#ifndef OPT4STORE_TESTS_DISK_TEST_UTIL_H_
#define OPT4STORE_TESTS_DISK_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "opt4store/plan.h"
#include "test_util.h"
#include "tiers/segment.h"

namespace opt4store_test {

inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// n pseudo-random bytes from seed.
inline std::string NoiseBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = SplitMix64(&state);
    std::memcpy(&s[i], &v, 8);
  }
  const uint64_t v = SplitMix64(&state);
  std::memcpy(&s[i], &v, n - i);
  return s;
}

inline std::string TestMeta(opt4store::ItemId id, uint32_t version = 0) {
  return "id=" + std::to_string(id) + ";v=" + std::to_string(version) + ";dtype=uint8";
}

// A payload of 0..max_bytes bytes; one id in four gets a compressible one
// (a repeated pattern), the rest noise that LZ4 cannot shrink.
inline std::string TestPayload(opt4store::ItemId id, uint32_t version = 0,
                               size_t max_bytes = 40000) {
  uint64_t state = (uint64_t{id} << 20) ^ version;
  const size_t n = static_cast<size_t>(SplitMix64(&state) % (max_bytes + 1));
  if (id % 4 == 0) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i / 64 + id + version) & 0x7F);
    return s;
  }
  return NoiseBytes(n, (uint64_t{id} << 20) ^ version ^ 0xABCDEF);
}

struct RawRecord {
  opt4store::ItemId id = 0;
  uint64_t offset = 0;
  opt4store::RecordHeader header;
};

// The well-formed records of a segment file, in order, up to the first
// malformed one.
inline std::vector<RawRecord> ReadSegmentRecords(const std::string& path) {
  const std::string bytes = ReadBytes(path);
  std::vector<RawRecord> out;
  uint64_t pos = 0;
  while (pos + opt4store::kRecordHeaderSize <= bytes.size()) {
    RawRecord r;
    if (!opt4store::DecodeRecordHeader(bytes.data() + pos, bytes.size() - pos, &r.header).ok()) {
      break;
    }
    r.id = r.header.id;
    r.offset = pos;
    out.push_back(r);
    pos += r.header.record_size();
  }
  return out;
}

// The segment files of a store directory, sorted by name.
inline std::vector<std::string> SegmentFiles(const std::string& store_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(store_dir + "/segments", ec)) {
    if (e.path().extension() == ".seg") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// XORs one byte of a file in place.
inline void FlipByte(const std::string& path, uint64_t offset, uint8_t mask = 0x5A) {
  std::string bytes = ReadBytes(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ mask);
  WriteBytes(path, bytes);
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_DISK_TEST_UTIL_H_
