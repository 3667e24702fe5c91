#include "tiers/crc32c.h"

#include <cstring>

namespace opt4store {
namespace crc32c {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPolynomial & (0u - (c & 1)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

#if defined(__x86_64__)
// The crc32 instruction takes 3 cycles but a new one can start every cycle,
// so one dependent chain runs at a third of the unit's speed. Long inputs
// are cut into rounds of three kStride-byte lanes, checksummed side by side
// and joined: on the raw register (no pre/post inversion) the CRC is linear,
// so crc(r, A B) = Shift(crc(r, A), |B|) ^ crc(0, B), where Shift(x, n) is
// the register after n zero bytes from x. Shift by kStride is a fixed linear
// map on 32 bits, kept as four 256-entry tables (one per byte of x).
constexpr size_t kStride = 4096;

__attribute__((target("sse4.2"))) uint64_t ChainHardware(uint64_t c, const uint8_t* p,
                                                         size_t words) {
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, p + 8 * i, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  return c;
}

struct StrideShift {
  uint32_t t[4][256];
  StrideShift() {
    static const uint8_t zeros[kStride] = {};
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      basis[bit] = static_cast<uint32_t>(ChainHardware(uint32_t{1} << bit, zeros, kStride / 8));
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= basis[8 * k + j];
        }
        t[k][b] = v;
      }
    }
  }
  uint32_t operator()(uint32_t x) const {
    return t[0][x & 0xFF] ^ t[1][(x >> 8) & 0xFF] ^ t[2][(x >> 16) & 0xFF] ^ t[3][x >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const uint8_t* p,
                                                           size_t n) {
  uint64_t c = ~crc;
  if (n >= 3 * kStride) {
    static const StrideShift shift;
    do {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < kStride; i += 8) {
        uint64_t wa, wb, wd;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kStride + i, 8);
        std::memcpy(&wd, p + 2 * kStride + i, 8);
        a = __builtin_ia32_crc32di(a, wa);
        b = __builtin_ia32_crc32di(b, wb);
        d = __builtin_ia32_crc32di(d, wd);
      }
      c = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(d);
      p += 3 * kStride;
      n -= 3 * kStride;
    } while (n >= 3 * kStride);
  }
  c = ChainHardware(c, p, n / 8);
  p += n & ~size_t{7};
  n &= 7;
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t size) {
  const Tables& tb = GetTables();
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = tb.t[7][lo & 0xFF] ^ tb.t[6][(lo >> 8) & 0xFF] ^ tb.t[5][(lo >> 16) & 0xFF] ^
        tb.t[4][lo >> 24] ^ tb.t[3][hi & 0xFF] ^ tb.t[2][(hi >> 8) & 0xFF] ^
        tb.t[1][(hi >> 16) & 0xFF] ^ tb.t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

bool HardwareAvailable() {
#if defined(__x86_64__)
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
#else
  return false;
#endif
}

uint32_t Extend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (HardwareAvailable()) return ExtendHardware(crc, static_cast<const uint8_t*>(data), size);
#endif
  return ExtendPortable(crc, data, size);
}

}  // namespace crc32c
}  // namespace opt4store
