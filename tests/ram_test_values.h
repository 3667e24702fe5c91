// ram_test_values.h: deterministic item values for the RAM tier and shared
// queue tests. A value is a function of (id, version): a 16-byte meta that
// names both, and a payload whose size and every 8-byte word derive from
// them. A reader that gets any bytes can tell exactly which version they
// claim to be and whether every byte belongs to it, so a torn read, a read
// of another item, or a stale read of reused space cannot pass.
//
// Header-only; no dependency on the code under test.
#ifndef OPT4STORE_TESTS_RAM_TEST_VALUES_H_
#define OPT4STORE_TESTS_RAM_TEST_VALUES_H_

#include <cstdint>
#include <cstring>
#include <string>

namespace opt4store_test {

inline uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Payload bytes of (id, version): min_size + a hash below span.
inline uint64_t PayloadSizeFor(uint64_t id, uint64_t version, uint64_t min_size, uint64_t span) {
  return min_size + (span == 0 ? 0 : Mix(id * 1000003 + version) % span);
}

inline std::string MetaFor(uint64_t id, uint64_t version) {
  std::string m(16, '\0');
  std::memcpy(&m[0], &id, 8);
  std::memcpy(&m[8], &version, 8);
  return m;
}

// Writes `size` payload bytes of (id, version) to dst.
inline void FillPayload(uint64_t id, uint64_t version, char* dst, uint64_t size) {
  const uint64_t seed = Mix(id * 0x100000001B3ULL ^ (version << 20));
  uint64_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t w = Mix(seed + i);
    std::memcpy(dst + i, &w, 8);
  }
  if (i < size) {
    const uint64_t w = Mix(seed + i);
    std::memcpy(dst + i, &w, size - i);
  }
}

inline std::string PayloadFor(uint64_t id, uint64_t version, uint64_t size) {
  std::string p(size, '\0');
  FillPayload(id, version, &p[0], size);
  return p;
}

// True when (meta, payload) is exactly one version of item `id` whose size
// follows PayloadSizeFor(min_size, span); *version gets that version.
inline bool IsValidValue(uint64_t id, const char* meta, uint64_t meta_size, const char* payload,
                         uint64_t payload_size, uint64_t min_size, uint64_t span,
                         uint64_t* version) {
  if (meta_size != 16) return false;
  uint64_t got_id, got_version;
  std::memcpy(&got_id, meta, 8);
  std::memcpy(&got_version, meta + 8, 8);
  if (got_id != id) return false;
  if (payload_size != PayloadSizeFor(id, got_version, min_size, span)) return false;
  const uint64_t seed = Mix(id * 0x100000001B3ULL ^ (got_version << 20));
  uint64_t i = 0;
  for (; i + 8 <= payload_size; i += 8) {
    const uint64_t w = Mix(seed + i);
    if (std::memcmp(payload + i, &w, 8) != 0) return false;
  }
  if (i < payload_size) {
    const uint64_t w = Mix(seed + i);
    if (std::memcmp(payload + i, &w, payload_size - i) != 0) return false;
  }
  if (version) *version = got_version;
  return true;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_RAM_TEST_VALUES_H_
