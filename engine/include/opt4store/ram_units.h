// The unit in which the RAM tier holds items, and in which a byte
// capacity's policy counts them: each item's meta + payload takes whole
// units. 64 bytes (a cache line, so that payloads stay aligned) up to a tier
// of 256 GiB; beyond that the unit doubles with each doubling of the tier,
// since an item's offset holds 32 bits of units. `opt4store simulate` with
// item sizes counts the same way, so that its hits are the store's.
#ifndef OPT4STORE_RAM_UNITS_H_
#define OPT4STORE_RAM_UNITS_H_

#include <cstdint>

namespace opt4store {

inline constexpr uint64_t kRamMaxUnits = uint64_t{1} << 32;

// The unit of a RAM tier of ram_bytes (at least 1).
constexpr uint64_t RamUnitBytes(uint64_t ram_bytes) {
  uint32_t shift = 6;
  while (shift < 40 && ((ram_bytes == 0 ? 0 : ram_bytes - 1) >> shift) >= kRamMaxUnits) ++shift;
  return uint64_t{1} << shift;
}

// `bytes` (at least 1) rounded up to whole units of `unit`; UINT64_MAX when
// that does not fit 64 bits.
constexpr uint64_t InRamUnits(uint64_t bytes, uint64_t unit) {
  const uint64_t b = bytes == 0 ? 1 : bytes;
  return b > UINT64_MAX - (unit - 1) ? UINT64_MAX : (b + unit - 1) / unit * unit;
}

static_assert(RamUnitBytes(uint64_t{256} << 30) == 64, "64-byte units up to 256 GiB");
static_assert(RamUnitBytes((uint64_t{256} << 30) + 1) == 128, "then twice as large");
static_assert(InRamUnits(0, 64) == 64 && InRamUnits(65, 64) == 128 && InRamUnits(128, 64) == 128,
              "whole units, at least one");
static_assert(InRamUnits(UINT64_MAX - 1, 64) == UINT64_MAX, "saturated");

}  // namespace opt4store

#endif  // OPT4STORE_RAM_UNITS_H_
