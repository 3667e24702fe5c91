// The RAM tier's shared-memory layout, for its two source files (ram_tier.cc:
// setup and the owner's side; ram_tier_read.cc: the readers' side): the
// header, the per-item entry and its state word, the stats slots. See the
// top of ram_tier.cc for the layout and the protocol.
#ifndef OPT4STORE_TIERS_RAM_TIER_LAYOUT_H_
#define OPT4STORE_TIERS_RAM_TIER_LAYOUT_H_

#include <atomic>
#include <cstdint>

#include "tiers/ram_tier.h"
#include "tiers/shared_memory.h"

namespace opt4store {

using shm::CurrentProcess;
using shm::ForkGeneration;
using shm::FutexWait;
using shm::FutexWake;
using shm::PackProcess;
using shm::ProcessAlive;
using shm::ProcessIdentity;
using shm::UnpackProcess;

namespace ram_tier_internal {

inline constexpr uint64_t kRamMagic = 0x31524D41'52345F4FULL;  // "O_4RAMR1"
inline constexpr uint32_t kRamVersion = 2;  // 2: bytes_used_peak
inline constexpr uint32_t kNumSlots = 256;
inline constexpr uint64_t kPage = 4096;
inline constexpr uint32_t kMinUnitShift = 6;  // 64-byte units: cache-line aligned payloads

inline constexpr uint64_t kStateMask = 0x3;
inline constexpr uint64_t kWaitersBit = 0x4;
inline constexpr uint64_t kGenOne = 0x8;
inline constexpr uint64_t kGenMask = 0xFFFFFFF8ULL;
inline constexpr uint64_t kAbsent = 0;
inline constexpr uint64_t kResident = 1;
inline constexpr uint64_t kFilling = 2;

inline constexpr uint64_t kPayloadMask = (uint64_t{1} << 40) - 1;

// Wait() sleeps at most this long before it checks that the owner lives.
inline constexpr int64_t kWaitSliceNs = 200 * 1000 * 1000;
// How often a wait for another reader's Put looks that reader's process up.
inline constexpr int64_t kPutterCheckNs = 20 * 1000 * 1000;

inline uint64_t StateOf(uint64_t word) { return word & kStateMask; }
inline uint64_t OffsetUnitsOf(uint64_t word) { return word >> 32; }
inline uint64_t Clean(uint64_t word) { return word & ~kWaitersBit; }
inline uint64_t NextWord(uint64_t old, uint64_t state, uint64_t offset_units) {
  return (offset_units << 32) | ((old + kGenOne) & kGenMask) | state;
}
inline uint64_t PackSizes(uint64_t meta, uint64_t payload) { return (meta << 40) | payload; }
inline uint64_t MetaOf(uint64_t sizes) { return sizes >> 40; }
inline uint64_t PayloadOf(uint64_t sizes) { return sizes & kPayloadMask; }
inline uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the futex word is the low half of the 64-bit state word");

}  // namespace ram_tier_internal

struct RamTier::Header {
  std::atomic<uint64_t> magic;  // kRamMagic, stored last
  uint32_t version;
  uint32_t unit_shift;
  uint64_t num_items;
  uint64_t arena_bytes;
  uint64_t slots_offset;
  uint64_t table_offset;
  uint64_t arena_offset;
  uint32_t num_slots;
  uint32_t entry_bytes;
  int32_t owner_pid;
  uint32_t reserved;
  uint64_t owner_start_ticks;
  std::atomic<uint32_t> owner_closed;  // set by the owner's destructor
  // Owner gauges: written by the owner alone, read by anyone (relaxed).
  alignas(128) std::atomic<uint64_t> items_resident;
  std::atomic<uint64_t> bytes_used;
  std::atomic<uint64_t> bytes_stored;
  std::atomic<uint64_t> free_blocks;
  std::atomic<uint64_t> largest_free_block;
  std::atomic<uint64_t> bytes_used_peak;
};

struct RamTier::Entry {
  std::atomic<uint64_t> word;
  std::atomic<uint64_t> sizes;
};

struct alignas(128) RamTier::StatsSlot {
  std::atomic<uint64_t> owner;  // PackProcess of the claimer; 0: free
  std::atomic<uint64_t> hits;
  std::atomic<uint64_t> misses;
  std::atomic<uint64_t> bytes_copied;
  std::atomic<uint64_t> retries;
  std::atomic<uint64_t> waits;
  std::atomic<uint64_t> inserts;
  std::atomic<uint64_t> evictions;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_RAM_TIER_LAYOUT_H_
