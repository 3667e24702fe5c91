// MakeTier for the RAM tier's tests: a fresh tier under a test's own
// shared-memory prefix.
#ifndef OPT4STORE_TESTS_RAM_TIER_TEST_UTIL_H_
#define OPT4STORE_TESTS_RAM_TIER_TEST_UTIL_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "tiers/ram_tier.h"

namespace opt4store_test {

inline std::unique_ptr<opt4store::RamTier> MakeRamTier(uint64_t capacity, uint64_t items,
                                                       const std::string& prefix) {
  opt4store::RamTierOptions o;
  o.capacity_bytes = capacity;
  o.num_items = items;
  o.name_prefix = prefix;
  std::unique_ptr<opt4store::RamTier> t;
  opt4store::Status s = opt4store::RamTier::Create(o, &t);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return t;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_RAM_TIER_TEST_UTIL_H_
