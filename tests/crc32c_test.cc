#include "tiers/crc32c.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

namespace opt4store {

TEST_CASE("crc32c: known vectors from RFC 3720", "[crc32c]") {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  CHECK(crc32c::Value(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c::Value(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c::Value(inc.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c::Value(dec.data(), 32) == 0x113FDB5Cu);
  CHECK(crc32c::Value("123456789", 9) == 0xE3069283u);
}

TEST_CASE("crc32c: hardware and portable paths agree, and Extend composes", "[crc32c]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string data(rng() % 5000, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const uint32_t whole = crc32c::Value(data.data(), data.size());
    CHECK(whole == crc32c::ExtendPortable(0, data.data(), data.size()));
    const size_t cut = data.empty() ? 0 : rng() % data.size();
    CHECK(crc32c::Extend(crc32c::Value(data.data(), cut), data.data() + cut, data.size() - cut) ==
          whole);
  }
}

TEST_CASE("crc32c: long inputs (three interleaved lanes) agree with the portable path",
          "[crc32c]") {
  // Lengths around multiples of the 3 x 4096-byte rounds, at odd offsets.
  std::mt19937 rng(11);
  std::string data(5 * 3 * 4096 + 64, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t len : {size_t{3 * 4096 - 1}, size_t{3 * 4096}, size_t{3 * 4096 + 1},
                     size_t{2 * 3 * 4096 + 7}, size_t{5 * 3 * 4096}, size_t{4 * 3 * 4096 + 4095}}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{13}}) {
      CAPTURE(len, offset);
      const char* p = data.data() + offset;
      const uint32_t seed = static_cast<uint32_t>(rng());
      CHECK(crc32c::Extend(seed, p, len) == crc32c::ExtendPortable(seed, p, len));
    }
  }
  const std::string zeros(3 * 4096, '\0');
  CHECK(crc32c::Value(zeros.data(), zeros.size()) ==
        crc32c::ExtendPortable(0, zeros.data(), zeros.size()));
}

TEST_CASE("crc32c: a flipped bit changes the checksum", "[crc32c]") {
  std::string data(4096, 'x');
  const uint32_t before = crc32c::Value(data.data(), data.size());
  data[1234] ^= 0x10;
  CHECK(crc32c::Value(data.data(), data.size()) != before);
}

}  // namespace opt4store
