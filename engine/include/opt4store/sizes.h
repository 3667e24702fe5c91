// Sizes and counts: byte counts as people write them ("512MiB", "1.5GiB", "2GB",
// "1000000"), one grammar for every place that reads one: the CLI's options
// (--ram, --disk, --capacity-bytes, --item-size) and Python's
// opt4store.parse_size (Store(ram="8GiB")), which calls ParseSize through
// the extension.
//
// The grammar:
//   size   = number [" "] [unit]
//   number = digits ["." digits]        digits: one or more of 0-9
//   unit   = "B"                        1
//          | "KiB" | "MiB" | "GiB" | "TiB"   2^10, 2^20, 2^30, 2^40
//          | "KB"  | "MB"  | "GB"  | "TB"    10^3, 10^6, 10^9, 10^12
// Units are case-insensitive ("2gib"); one space may separate the number
// from the unit ("64 KiB", as FormatSize prints). A fraction needs a unit
// above B ("1.5GiB"; "1.5" and "1.5B" are errors), has at most 18 digits and
// is rounded to the nearest byte, half up ("1.7KiB" is 1741). Nothing else
// is a size: no sign, no exponent ("1e9"), no digit grouping ("1_000",
// "1,000"), no space before the number or after the unit, no number without
// digits before the point (".5GiB"), and no one-letter unit ("k" is 1000 to
// some and 1024 to others: write KiB or KB). The largest size is
// 2^64 - 1 bytes.
//
// Thread safety: plain functions.
#ifndef OPT4STORE_SIZES_H_
#define OPT4STORE_SIZES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "opt4store/status.h"

namespace opt4store {

// Parses text by the grammar above into *bytes.
// Returns: OK; InvalidArgument quoting the text and saying what is wrong
// (not a size, a fraction of a byte, a one-letter unit, too large). *bytes
// is unchanged on an error.
Status ParseSize(std::string_view text, uint64_t* bytes);

// A count: decimal digits only ("512"; no sign, no spaces, no unit), at
// most 2^64 - 1. Returns InvalidArgument quoting the text otherwise; *value
// is unchanged on an error. Every place that reads a whole number of items
// or positions uses it (the CLI's flags, the store's manifest and settings).
Status ParseCount(std::string_view text, uint64_t* value);

// "512 B", "1.50 KiB", "3.00 GiB": binary units, two decimals, for people.
// ParseSize reads it back to within the rounding of the two decimals.
std::string FormatSize(uint64_t bytes);

}  // namespace opt4store

#endif  // OPT4STORE_SIZES_H_
