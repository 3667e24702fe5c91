#include "opt4store/sizes.h"

#include <cctype>
#include <cstdio>
#include <string>

namespace opt4store {

namespace {

struct SizeUnit {
  const char* name;
  uint64_t multiplier;
};

constexpr SizeUnit kUnits[] = {
    {"B", 1},
    {"KiB", uint64_t{1} << 10},
    {"MiB", uint64_t{1} << 20},
    {"GiB", uint64_t{1} << 30},
    {"TiB", uint64_t{1} << 40},
    {"KB", 1000ull},
    {"MB", 1000ull * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
};

// 18 digits keep the fraction's numerator below 10^18, so that numerator x
// multiplier (at most 2^40) fits in 128 bits; a TiB has 13 significant
// digits of bytes anyway.
constexpr size_t kMaxFractionDigits = 18;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status ParseCount(std::string_view text, uint64_t* value) {
  if (text.empty()) return Status::InvalidArgument("empty value, expected a non-negative integer");
  uint64_t v = 0;
  for (char c : text) {
    if (!IsDigit(c)) {
      return Status::InvalidArgument("'" + std::string(text) + "' is not a non-negative integer");
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) {
      return Status::InvalidArgument("'" + std::string(text) + "' is too large (the maximum is " +
                                     std::to_string(UINT64_MAX) + ")");
    }
    v = v * 10 + digit;
  }
  *value = v;
  return Status::OK();
}

Status ParseSize(std::string_view text, uint64_t* bytes) {
  const std::string quoted = "'" + std::string(text) + "'";
  const Status not_a_size = Status::InvalidArgument(
      quoted +
      " is not a size (a byte count, or a number and a unit: 512MiB, 1.5GiB, 2GB; the units "
      "are B, KiB, MiB, GiB, TiB, KB, MB, GB and TB)");
  const Status too_large = Status::InvalidArgument(
      quoted + " is too large (the largest size is " + std::to_string(UINT64_MAX) + " bytes)");

  size_t i = 0;
  while (i < text.size() && IsDigit(text[i])) ++i;
  const std::string_view whole = text.substr(0, i);
  if (whole.empty()) return not_a_size;
  std::string_view fraction;
  if (i < text.size() && text[i] == '.') {
    const size_t start = ++i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    fraction = text.substr(start, i - start);
    if (fraction.empty()) return not_a_size;
  }

  std::string_view unit = text.substr(i);
  if (!unit.empty() && unit.front() == ' ') {
    unit.remove_prefix(1);
    if (unit.empty()) return not_a_size;  // a space must be followed by a unit
  }
  uint64_t multiplier = 1;
  if (!unit.empty()) {
    multiplier = 0;
    for (const SizeUnit& u : kUnits) {
      if (EqualsIgnoreCase(unit, u.name)) multiplier = u.multiplier;
    }
    if (multiplier == 0) {
      const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
      if (unit.size() == 1 && (c == 'K' || c == 'M' || c == 'G' || c == 'T')) {
        const std::string number(text.substr(0, i));
        return Status::InvalidArgument(quoted + " is not a size: '" + std::string(unit) +
                                       "' is 1000 to some and 1024 to others; write " + number +
                                       c + "iB or " + number + c + "B");
      }
      return not_a_size;
    }
  }
  if (!fraction.empty() && multiplier == 1) {
    return Status::InvalidArgument(quoted +
                                   " is not a whole number of bytes (a fraction needs a unit "
                                   "above B, e.g. 1.5KiB)");
  }
  if (fraction.size() > kMaxFractionDigits) {
    return Status::InvalidArgument(quoted + " has more than " +
                                   std::to_string(kMaxFractionDigits) +
                                   " digits after the point");
  }

  uint64_t value = 0;
  for (char c : whole) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return too_large;
    value = value * 10 + digit;
  }
  if (value > UINT64_MAX / multiplier) return too_large;
  value *= multiplier;
  if (!fraction.empty()) {
    // round(0.fraction x multiplier), half up, in exact integers.
    uint64_t numerator = 0;
    uint64_t denominator = 1;
    for (char c : fraction) {
      numerator = numerator * 10 + static_cast<uint64_t>(c - '0');
      denominator *= 10;
    }
    const unsigned __int128 scaled = static_cast<unsigned __int128>(numerator) * multiplier;
    const uint64_t extra = static_cast<uint64_t>((scaled + denominator / 2) / denominator);
    if (value > UINT64_MAX - extra) return too_large;
    value += extra;
  }
  *bytes = value;
  return Status::OK();
}

std::string FormatSize(uint64_t bytes) {
  static const char* const kBinaryUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kBinaryUnits[unit]);
  return buf;
}

}  // namespace opt4store
