// NumberFile: every format read back from bytes the test writes by hand
// (the .npy files follow the NPY format specification byte by byte, so the
// reader is checked against the real format and not only against our own
// writer), the errors and the messages that must name the culprit, and the
// writer's round trips.
// Longer than 600 lines because: one case list per number-file format
// (.txt, .u32, .u64, .npy) over the same reader, in one binary (a test
// binary links the whole store: about 15 s each on the 2-core CI machine).
#include "opt4store/number_file.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::BE;
using opt4store_test::FileExists;
using opt4store_test::LE;
using opt4store_test::MentionsAny;
using opt4store_test::NamesNumber;
using opt4store_test::ReadBytes;
using opt4store_test::TempDir;
using opt4store_test::WriteBytes;

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

// ---------------------------------------------------------------- helpers

struct ReadOutcome {
  Status status;  // the first error from Open or Read, else OK
  bool opened = false;
  std::vector<uint64_t> values;
  NumberFormat format = NumberFormat::kText;
  uint64_t npy_rows = 0;
  uint64_t binary_count = 0;
};

// Opens path and reads it to the end `chunk` values at a time.
ReadOutcome ReadAll(const std::string& path, size_t chunk = 3, uint64_t max_value = kMax64) {
  ReadOutcome r;
  std::unique_ptr<NumberFileReader> reader;
  r.status = NumberFileReader::Open(path, &reader);
  if (!r.status.ok()) {
    CHECK(reader == nullptr);
    return r;
  }
  REQUIRE(reader != nullptr);
  r.opened = true;
  r.format = reader->format();
  r.npy_rows = reader->npy_rows();
  r.binary_count = reader->binary_count();
  std::vector<uint64_t> buf(chunk);
  for (int guard = 0; guard < 1000000; ++guard) {
    size_t count = 12345;
    r.status = reader->Read(buf.data(), buf.size(), &count, max_value);
    if (!r.status.ok()) return r;
    REQUIRE(count <= chunk);
    if (count == 0) {
      // Exhausted: further calls stay exhausted.
      size_t again = 999;
      Status st = reader->Read(buf.data(), buf.size(), &again, max_value);
      CHECK(st.ok());
      CHECK(again == 0);
      return r;
    }
    r.values.insert(r.values.end(), buf.begin(), buf.begin() + count);
  }
  FAIL("reader never reached the end");
  return r;
}

// The NPY format (numpy.lib.format): magic "\x93NUMPY", major, minor,
// header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), then an ASCII
// Python dict literal padded with spaces and ended by '\n' so that the whole
// preamble is a multiple of `align` bytes, then the raw data.
std::string NpyFromDict(const std::string& dict, const std::string& data, int major = 1,
                        size_t align = 64) {
  const size_t prefix = major == 1 ? 10 : 12;
  const size_t unpadded = prefix + dict.size() + 1;
  const size_t pad = (align - unpadded % align) % align;
  const std::string header = dict + std::string(pad, ' ') + "\n";
  std::string out;
  out.push_back(static_cast<char>(0x93));
  out += "NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  out += major == 1 ? LE(header.size(), 2) : LE(header.size(), 4);
  out += header;
  REQUIRE((out.size() % align) == 0);
  out += data;
  return out;
}

std::string NpyDict(const std::string& descr, bool fortran, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

std::string Npy(const std::string& descr, bool fortran, const std::string& shape,
                const std::string& data) {
  return NpyFromDict(NpyDict(descr, fortran, shape), data);
}

std::string Encode(const std::vector<uint64_t>& values, int width, bool big_endian = false) {
  std::string s;
  for (uint64_t v : values) s += big_endian ? BE(v, width) : LE(v, width);
  return s;
}

// Where a value of a binary file starts.
uint64_t DataOffset(const std::string& file_bytes, const std::string& data) {
  return file_bytes.size() - data.size();
}

// ------------------------------------------------------- formats and names

TEST_CASE("Formats are chosen by extension and named", "[number_file]") {
  CHECK(NumberFormatFromPath("/a/b/ids.u32") == NumberFormat::kU32);
  CHECK(NumberFormatFromPath("ids.u64") == NumberFormat::kU64);
  CHECK(NumberFormatFromPath("plan.npy") == NumberFormat::kNpy);
  CHECK(NumberFormatFromPath("plan.txt") == NumberFormat::kText);
  CHECK(NumberFormatFromPath("plan") == NumberFormat::kText);
  CHECK(NumberFormatFromPath("plan.csv") == NumberFormat::kText);
  CHECK(NumberFormatFromPath("npy") == NumberFormat::kText);

  const std::vector<std::pair<std::string, NumberFormat>> names = {
      {"txt", NumberFormat::kText},
      {"u32", NumberFormat::kU32},
      {"u64", NumberFormat::kU64},
      {"npy", NumberFormat::kNpy}};
  for (const auto& [name, format] : names) {
    NumberFormat parsed = NumberFormat::kText;
    INFO(name);
    REQUIRE(ParseNumberFormat(name, &parsed).ok());
    CHECK(parsed == format);
    CHECK(std::string(NumberFormatName(format)) == name);
  }
  NumberFormat unused;
  CHECK_FALSE(ParseNumberFormat("u16", &unused).ok());
  CHECK_FALSE(ParseNumberFormat("", &unused).ok());
}

// --------------------------------------------------------------------- text

TEST_CASE("Text: comments, blank lines and surrounding spaces are skipped", "[number_file]") {
  TempDir dir;
  const std::string path = dir.File("ids.txt");
  WriteBytes(path,
             "# a header comment\n"
             "\n"
             "  5  \n"
             "17\n"
             "\n"
             "# another comment, 99\n"
             "0\n"
             "   18446744073709551615\n"
             "007\n"
             "42");  // no final newline
  const std::vector<uint64_t> expected = {5, 17, 0, kMax64, 7, 42};
  for (size_t chunk : {1, 2, 4, 1000}) {
    INFO("chunk " << chunk);
    ReadOutcome r = ReadAll(path, chunk);
    REQUIRE(r.status.ok());
    CHECK(r.format == NumberFormat::kText);
    CHECK(r.binary_count == 0);
    CHECK(r.npy_rows == 0);
    CHECK(r.values == expected);
  }
  std::vector<uint64_t> all;
  REQUIRE(ReadNumberFile(path, kMax64, &all).ok());
  CHECK(all == expected);
  // The file name decides the format; any other extension is text too.
  const std::string other = dir.File("ids");
  WriteBytes(other, "3\n1\n");
  ReadOutcome r = ReadAll(other);
  REQUIRE(r.status.ok());
  CHECK(r.values == std::vector<uint64_t>{3, 1});
}

TEST_CASE("Text: an empty file or one with only comments holds no values", "[number_file]") {
  TempDir dir;
  for (const std::string& content : {std::string(""), std::string("\n\n"),
                                     std::string("# only\n# comments\n")}) {
    const std::string path = dir.File("empty.txt");
    WriteBytes(path, content);
    ReadOutcome r = ReadAll(path);
    REQUIRE(r.status.ok());
    CHECK(r.values.empty());
  }
}

struct BadText {
  std::string content;
  uint64_t line;
};

TEST_CASE("Text: a malformed line is an error naming the file and the line", "[number_file]") {
  TempDir dir;
  const std::string path = dir.File("bad.txt");
  const std::vector<BadText> cases = {
      {"1\n2\n# c\n\nabc\n6\n", 5},
      {"1\n\n2\n-3\n", 4},
      {"1\n12abc\n", 2},
      {"5\n5\n18446744073709551616\n", 3},  // 2^64: does not fit
      {"# c\n8 9\n", 2},                    // two numbers on one line
      {"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\nx11\n", 11},
  };
  for (const BadText& c : cases) {
    INFO("content: " << c.content);
    WriteBytes(path, c.content);
    ReadOutcome r = ReadAll(path, 2);
    REQUIRE_FALSE(r.status.ok());
    INFO("message: " << r.status.ToString());
    CHECK(r.status.message().find(path) != std::string::npos);
    CHECK(NamesNumber(r.status.message(), c.line, {path}));
    std::vector<uint64_t> all;
    Status whole = ReadNumberFile(path, kMax64, &all);
    CHECK_FALSE(whole.ok());
    CHECK(NamesNumber(whole.message(), c.line, {path}));
    NumberFileSummary summary;
    Status scan = SummarizeNumberFile(path, kMax64, &summary);
    CHECK_FALSE(scan.ok());
    CHECK(NamesNumber(scan.message(), c.line, {path}));
  }
}

TEST_CASE("Text: a value above max_value is an error naming its line", "[number_file]") {
  TempDir dir;
  const std::string path = dir.File("ids.txt");
  // Line 6 holds 1001 > 1000; 1000 itself (line 4) is allowed.
  WriteBytes(path, "5\n# c\n\n1000\n0\n1001\n2\n");
  ReadOutcome r = ReadAll(path, 1, 1000);
  REQUIRE_FALSE(r.status.ok());
  INFO(r.status.ToString());
  CHECK(r.status.message().find(path) != std::string::npos);
  CHECK(NamesNumber(r.status.message(), 6, {path}));
  // Everything before the bad line was delivered first.
  CHECK(r.values == std::vector<uint64_t>{5, 1000, 0});
  // With a larger bound the same file is fine.
  ReadOutcome ok = ReadAll(path, 3, 1001);
  REQUIRE(ok.status.ok());
  CHECK(ok.values == std::vector<uint64_t>{5, 1000, 0, 1001, 2});
}

// -------------------------------------------------------------- .u32 .u64

TEST_CASE("Raw .u32 and .u64 files are little-endian values", "[number_file]") {
  TempDir dir;
  SECTION("u32") {
    const std::vector<uint64_t> values = {0, 1, 0xFFFFFFFFull, 123456789, 7, 0x01020304};
    const std::string path = dir.File("ids.u32");
    WriteBytes(path, Encode(values, 4));
    for (size_t chunk : {1, 4, 100}) {
      ReadOutcome r = ReadAll(path, chunk);
      REQUIRE(r.status.ok());
      CHECK(r.format == NumberFormat::kU32);
      CHECK(r.binary_count == values.size());
      CHECK(r.npy_rows == 0);
      CHECK(r.values == values);
    }
  }
  SECTION("u64") {
    const std::vector<uint64_t> values = {0, uint64_t{1} << 40, kMax64, 42, 0x0102030405060708ull};
    const std::string path = dir.File("ids.u64");
    WriteBytes(path, Encode(values, 8));
    ReadOutcome r = ReadAll(path, 2);
    REQUIRE(r.status.ok());
    CHECK(r.format == NumberFormat::kU64);
    CHECK(r.binary_count == values.size());
    CHECK(r.values == values);
  }
  SECTION("empty") {
    const std::string path = dir.File("empty.u32");
    WriteBytes(path, "");
    ReadOutcome r = ReadAll(path);
    REQUIRE(r.status.ok());
    CHECK(r.binary_count == 0);
    CHECK(r.values.empty());
  }
}

TEST_CASE("A raw file whose length is not a multiple of the width names the offset",
          "[number_file]") {
  TempDir dir;
  SECTION("u32: 7 values and 3 stray bytes; the partial value starts at 28") {
    const std::string path = dir.File("ids.u32");
    WriteBytes(path, Encode({1, 2, 3, 4, 5, 6, 7}, 4) + std::string("\x01\x02\x03", 3));
    ReadOutcome r = ReadAll(path);
    REQUIRE_FALSE(r.status.ok());
    INFO(r.status.ToString());
    CHECK(r.status.message().find(path) != std::string::npos);
    CHECK(NamesNumber(r.status.message(), 28, {path}));
    std::vector<uint64_t> all;
    Status whole = ReadNumberFile(path, kMax64, &all);
    CHECK_FALSE(whole.ok());
    CHECK(NamesNumber(whole.message(), 28, {path}));
    NumberFileSummary summary;
    CHECK_FALSE(SummarizeNumberFile(path, kMax64, &summary).ok());
  }
  SECTION("u64: 3 values and 5 stray bytes; the partial value starts at 24") {
    const std::string path = dir.File("ids.u64");
    WriteBytes(path, Encode({1, 2, 3}, 8) + std::string(5, '\0'));
    ReadOutcome r = ReadAll(path);
    REQUIRE_FALSE(r.status.ok());
    INFO(r.status.ToString());
    CHECK(NamesNumber(r.status.message(), 24, {path}));
  }
}

TEST_CASE("A raw value above max_value names its byte offset", "[number_file]") {
  TempDir dir;
  SECTION("u64 value index 5 -> offset 40") {
    const std::string path = dir.File("ids.u64");
    WriteBytes(path, Encode({1, 2, 3, 4, 5, 777, 6}, 8));
    ReadOutcome r = ReadAll(path, 2, 500);
    REQUIRE_FALSE(r.status.ok());
    INFO(r.status.ToString());
    CHECK(r.status.message().find(path) != std::string::npos);
    CHECK(NamesNumber(r.status.message(), 40, {path}));
    std::vector<uint64_t> all;
    Status whole = ReadNumberFile(path, 500, &all);
    CHECK_FALSE(whole.ok());
    CHECK(NamesNumber(whole.message(), 40, {path}));
    NumberFileSummary summary;
    Status scan = SummarizeNumberFile(path, 500, &summary);
    CHECK_FALSE(scan.ok());
    CHECK(NamesNumber(scan.message(), 40, {path}));
    // 777 itself is allowed when it is the bound.
    CHECK(ReadAll(path, 2, 777).status.ok());
  }
  SECTION("u32 value index 3 -> offset 12") {
    const std::string path = dir.File("ids.u32");
    WriteBytes(path, Encode({9, 9, 9, 4000000000ull, 9}, 4));
    ReadOutcome r = ReadAll(path, 10, 3999999999ull);
    REQUIRE_FALSE(r.status.ok());
    INFO(r.status.ToString());
    CHECK(NamesNumber(r.status.message(), 12, {path}));
  }
}

// --------------------------------------------------------------------- .npy

struct NpyDtype {
  std::string descr;
  int width;
  bool is_signed;
};

const std::vector<NpyDtype>& NpyDtypes() {
  static const std::vector<NpyDtype> kTypes = {
      {"<i4", 4, true}, {"<i8", 8, true}, {"<u4", 4, false}, {"<u8", 8, false}};
  return kTypes;
}

// Values that fit every dtype's non-negative range, plus its maximum.
std::vector<uint64_t> ValuesFor(const NpyDtype& t, size_t n) {
  std::vector<uint64_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back((i * 2654435761u) % 100000);
  const uint64_t max = t.width == 4 ? (t.is_signed ? 0x7FFFFFFFull : 0xFFFFFFFFull)
                                    : (t.is_signed ? 0x7FFFFFFFFFFFFFFFull : kMax64);
  if (n > 1) v[1] = max;
  return v;
}

TEST_CASE("npy 1-D: int32, int64, uint32, uint64", "[number_file][npy]") {
  TempDir dir;
  for (const NpyDtype& t : NpyDtypes()) {
    INFO(t.descr);
    const std::vector<uint64_t> values = ValuesFor(t, 11);
    const std::string path = dir.File("ids.npy");
    WriteBytes(path, Npy(t.descr, false, "(11,)", Encode(values, t.width)));
    for (size_t chunk : {1, 5, 64}) {
      ReadOutcome r = ReadAll(path, chunk);
      REQUIRE(r.status.ok());
      CHECK(r.format == NumberFormat::kNpy);
      CHECK(r.npy_rows == 0);
      CHECK(r.binary_count == 11);
      CHECK(r.values == values);
    }
    NumberFileSummary summary;
    REQUIRE(SummarizeNumberFile(path, kMax64, &summary).ok());
    CHECK(summary.count == 11);
    CHECK(summary.npy_rows == 0);
    CHECK(summary.format == NumberFormat::kNpy);
    CHECK(summary.max_value == *std::max_element(values.begin(), values.end()));
  }
}

TEST_CASE("npy 2-D: rows are epochs, values in C order", "[number_file][npy]") {
  TempDir dir;
  for (const NpyDtype& t : NpyDtypes()) {
    INFO(t.descr);
    const std::vector<uint64_t> values = ValuesFor(t, 12);  // 3 rows x 4
    const std::string path = dir.File("plan.npy");
    WriteBytes(path, Npy(t.descr, false, "(3, 4)", Encode(values, t.width)));
    ReadOutcome r = ReadAll(path, 5);
    REQUIRE(r.status.ok());
    CHECK(r.npy_rows == 3);
    CHECK(r.binary_count == 12);
    CHECK(r.values == values);
    NumberFileSummary summary;
    REQUIRE(SummarizeNumberFile(path, kMax64, &summary).ok());
    CHECK(summary.count == 12);
    CHECK(summary.npy_rows == 3);
  }
}

TEST_CASE("npy headers as other writers lay them out", "[number_file][npy]") {
  TempDir dir;
  const std::string path = dir.File("x.npy");
  const std::vector<uint64_t> values = {4, 0, 9, 2, 7, 1};
  const std::string data = Encode(values, 8);
  SECTION("numpy < 1.14 aligned the header to 16 bytes, not 64") {
    WriteBytes(path, NpyFromDict(NpyDict("<i8", false, "(6,)"), data, 1, 16));
  }
  SECTION("keys in another order (the header is any Python dict literal)") {
    WriteBytes(path,
               NpyFromDict("{'shape': (6,), 'fortran_order': False, 'descr': '<i8'}", data));
  }
  SECTION("no spaces and no trailing comma") {
    WriteBytes(path, NpyFromDict("{'descr':'<i8','fortran_order':False,'shape':(2,3)}", data));
  }
  SECTION("format 2.0: a 4-byte header length") {
    WriteBytes(path, NpyFromDict(NpyDict("<i8", false, "(6,)"), data, 2));
  }
  SECTION("format 3.0: like 2.0 with a utf-8 header") {
    WriteBytes(path, NpyFromDict(NpyDict("<i8", false, "(6,)"), data, 3));
  }
  ReadOutcome r = ReadAll(path, 4);
  REQUIRE(r.status.ok());
  CHECK(r.values == values);
}

struct RejectedNpy {
  std::string name;
  std::string bytes;
  std::vector<std::string> words;  // the message names at least one of these
};

TEST_CASE("npy files the reader must reject when it opens them", "[number_file][npy]") {
  TempDir dir;
  const std::string path = dir.File("bad.npy");
  const std::vector<RejectedNpy> cases = {
      {"big-endian int32", Npy(">i4", false, "(3,)", Encode({1, 2, 3}, 4, true)),
       {"endian", ">i4", "big", "byte order", "byteorder"}},
      {"big-endian uint64", Npy(">u8", false, "(3,)", Encode({1, 2, 3}, 8, true)),
       {"endian", ">u8", "big", "byte order", "byteorder"}},
      {"float64", Npy("<f8", false, "(3,)", std::string(24, '\0')), {"<f8", "float", "dtype"}},
      {"float32", Npy("<f4", false, "(3,)", std::string(12, '\0')), {"<f4", "float", "dtype"}},
      {"int16", Npy("<i2", false, "(3,)", std::string(6, '\0')), {"<i2", "dtype"}},
      {"fortran order", Npy("<i8", true, "(2, 3)", Encode({1, 2, 3, 4, 5, 6}, 8)),
       {"fortran"}},
      {"3-D", Npy("<i8", false, "(2, 2, 2)", std::string(64, '\0')),
       {"shape", "dimension", "3-d", "2-d", "1-d", "ndim"}},
      {"bad magic", std::string("\x93NUMPZ\x01\x00", 8) + LE(54, 2) + std::string(54, ' '),
       {"magic", "npy", "numpy"}},
  };
  for (const RejectedNpy& c : cases) {
    INFO(c.name);
    WriteBytes(path, c.bytes);
    std::unique_ptr<NumberFileReader> reader;
    Status s = NumberFileReader::Open(path, &reader);
    REQUIRE_FALSE(s.ok());
    INFO(s.ToString());
    CHECK(reader == nullptr);
    CHECK(s.message().find(path) != std::string::npos);
    CHECK(MentionsAny(s.message(), c.words));
    std::vector<uint64_t> all;
    CHECK_FALSE(ReadNumberFile(path, kMax64, &all).ok());
  }
}

TEST_CASE("npy: a negative signed value is an error naming its byte offset",
          "[number_file][npy]") {
  TempDir dir;
  const std::string path = dir.File("neg.npy");
  for (const NpyDtype& t : {NpyDtypes()[0], NpyDtypes()[1]}) {
    INFO(t.descr);
    // -5 as two's complement at index 2.
    const uint64_t minus5 = t.width == 4 ? 0xFFFFFFFBull : 0xFFFFFFFFFFFFFFFBull;
    const std::string data = Encode({1, 2, minus5, 4}, t.width);
    const std::string bytes = Npy(t.descr, false, "(4,)", data);
    WriteBytes(path, bytes);
    ReadOutcome r = ReadAll(path, 1);
    REQUIRE_FALSE(r.status.ok());
    INFO(r.status.ToString());
    CHECK(NamesNumber(r.status.message(), DataOffset(bytes, data) + 2 * t.width, {path}));
  }
}

TEST_CASE("npy: a value above max_value names its byte offset", "[number_file][npy]") {
  TempDir dir;
  const std::string path = dir.File("big.npy");
  const std::string data = Encode({3, 1, 4, 1, 5, 9, 2, 6}, 8);
  const std::string bytes = Npy("<u8", false, "(2, 4)", data);
  WriteBytes(path, bytes);
  ReadOutcome r = ReadAll(path, 3, 8);  // 9 at index 5 is too big
  REQUIRE_FALSE(r.status.ok());
  INFO(r.status.ToString());
  CHECK(NamesNumber(r.status.message(), DataOffset(bytes, data) + 5 * 8, {path}));
}

TEST_CASE("npy: data shorter than the shape says is an error", "[number_file][npy]") {
  TempDir dir;
  const std::string path = dir.File("short.npy");
  WriteBytes(path, Npy("<i8", false, "(5,)", Encode({1, 2, 3, 4}, 8)));
  ReadOutcome r = ReadAll(path, 2);
  CHECK_FALSE(r.status.ok());
  std::vector<uint64_t> all;
  CHECK_FALSE(ReadNumberFile(path, kMax64, &all).ok());
}

// ----------------------------------------------------------------- missing

TEST_CASE("A missing file is NotFound and names the path", "[number_file]") {
  TempDir dir;
  for (const char* name : {"nope.txt", "nope.u32", "nope.u64", "nope.npy"}) {
    const std::string path = dir.File(name);
    INFO(path);
    std::unique_ptr<NumberFileReader> reader;
    Status s = NumberFileReader::Open(path, &reader);
    CHECK(s.IsNotFound());
    CHECK(s.message().find(path) != std::string::npos);
    CHECK(reader == nullptr);
    std::vector<uint64_t> all;
    Status whole = ReadNumberFile(path, kMax64, &all);
    CHECK(whole.IsNotFound());
    CHECK(whole.message().find(path) != std::string::npos);
    NumberFileSummary summary;
    Status scan = SummarizeNumberFile(path, kMax64, &summary);
    CHECK(scan.IsNotFound());
    CHECK(scan.message().find(path) != std::string::npos);
  }
}

// ---------------------------------------------------------------- summary

TEST_CASE("SummarizeNumberFile counts values and finds the maximum", "[number_file]") {
  TempDir dir;
  SECTION("text") {
    const std::string path = dir.File("s.txt");
    WriteBytes(path, "# c\n3\n\n70\n  12 \n");
    NumberFileSummary s;
    REQUIRE(SummarizeNumberFile(path, kMax64, &s).ok());
    CHECK(s.count == 3);
    CHECK(s.max_value == 70);
    CHECK(s.npy_rows == 0);
    CHECK(s.format == NumberFormat::kText);
    CHECK(SummarizeNumberFile(path, 70, &s).ok());
    Status tight = SummarizeNumberFile(path, 69, &s);
    CHECK_FALSE(tight.ok());
    CHECK(NamesNumber(tight.message(), 4, {path}));  // 70 is on line 4
  }
  SECTION("u32") {
    const std::string path = dir.File("s.u32");
    WriteBytes(path, Encode({5, 4000000000ull, 6}, 4));
    NumberFileSummary s;
    REQUIRE(SummarizeNumberFile(path, kMax64, &s).ok());
    CHECK(s.count == 3);
    CHECK(s.max_value == 4000000000ull);
    CHECK(s.format == NumberFormat::kU32);
  }
  SECTION("u64") {
    const std::string path = dir.File("s.u64");
    WriteBytes(path, Encode({kMax64 - 1, 2}, 8));
    NumberFileSummary s;
    REQUIRE(SummarizeNumberFile(path, kMax64, &s).ok());
    CHECK(s.count == 2);
    CHECK(s.max_value == kMax64 - 1);
    CHECK(s.format == NumberFormat::kU64);
  }
}

// ------------------------------------------------------------------ writer

std::vector<uint64_t> WriteWith(const std::string& path, NumberFormat format,
                                const std::vector<uint64_t>& values, uint64_t rows,
                                const TempDir& dir) {
  std::unique_ptr<NumberFileWriter> writer;
  REQUIRE(NumberFileWriter::Open(path, format, values.size(), rows, &writer).ok());
  REQUIRE(writer != nullptr);
  // Appended in uneven pieces.
  size_t at = 0;
  for (size_t piece = 1; at < values.size(); piece = piece * 2 + 1) {
    const size_t n = std::min(piece, values.size() - at);
    REQUIRE(writer->Append(values.data() + at, n).ok());
    at += n;
  }
  // Until Finish, a reader never sees a half-written file under path.
  CHECK_FALSE(FileExists(path));
  REQUIRE(writer->Finish().ok());
  writer.reset();
  CHECK(FileExists(path));
  CHECK_FALSE(FileExists(path + ".tmp"));
  for (const std::string& name : dir.List()) {
    CHECK(name.find(".tmp") == std::string::npos);
  }
  std::vector<uint64_t> back;
  REQUIRE(ReadNumberFile(path, kMax64, &back).ok());
  return back;
}

TEST_CASE("NumberFileWriter round-trips every format and leaves no .tmp file",
          "[number_file][writer]") {
  TempDir dir;
  std::vector<uint64_t> small = {0, 1, 2, 0xFFFFFFFFull, 12345, 7, 7, 0};
  std::vector<uint64_t> wide = small;
  wide.push_back(uint64_t{1} << 40);
  wide.push_back(0x7FFFFFFFFFFFFFFFull);  // the largest int64

  SECTION("text") {
    const std::string path = dir.File("w.txt");
    std::vector<uint64_t> all = wide;
    all.push_back(kMax64);
    CHECK(WriteWith(path, NumberFormat::kText, all, 0, dir) == all);
    // One integer per line, by the format's own definition.
    std::vector<uint64_t> parsed;
    std::string text = ReadBytes(path);
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      if (line.empty() || line[0] == '#') continue;
      parsed.push_back(std::stoull(line));
    }
    CHECK(parsed == all);
  }
  SECTION("u32") {
    const std::string path = dir.File("w.u32");
    CHECK(WriteWith(path, NumberFormat::kU32, small, 0, dir) == small);
    CHECK(ReadBytes(path) == Encode(small, 4));
  }
  SECTION("u64") {
    const std::string path = dir.File("w.u64");
    std::vector<uint64_t> all = wide;
    all.push_back(kMax64);
    CHECK(WriteWith(path, NumberFormat::kU64, all, 0, dir) == all);
    CHECK(ReadBytes(path) == Encode(all, 8));
  }
  SECTION("npy 1-D, checked against the NPY format by hand") {
    const std::string path = dir.File("w.npy");
    CHECK(WriteWith(path, NumberFormat::kNpy, wide, 0, dir) == wide);
    const std::string bytes = ReadBytes(path);
    REQUIRE(bytes.size() > 10);
    CHECK(static_cast<unsigned char>(bytes[0]) == 0x93);
    CHECK(bytes.substr(1, 5) == "NUMPY");
    REQUIRE(bytes[6] == 1);  // format 1.0
    CHECK(bytes[7] == 0);
    const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                              (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    const size_t data_offset = 10 + header_len;
    CHECK(data_offset % 16 == 0);
    REQUIRE(bytes.size() == data_offset + 8 * wide.size());
    const std::string header = bytes.substr(10, header_len);
    CHECK(header.back() == '\n');
    CHECK(header.find("'descr': '<i8'") != std::string::npos);
    CHECK(header.find("'fortran_order': False") != std::string::npos);
    CHECK(header.find("'shape': (" + std::to_string(wide.size()) + ",)") != std::string::npos);
    CHECK(bytes.substr(data_offset) == Encode(wide, 8));
    std::unique_ptr<NumberFileReader> reader;
    REQUIRE(NumberFileReader::Open(path, &reader).ok());
    CHECK(reader->npy_rows() == 0);
    CHECK(reader->binary_count() == wide.size());
  }
  SECTION("npy 2-D: rows x (values / rows)") {
    const std::string path = dir.File("w2.npy");
    std::vector<uint64_t> grid(12);
    for (size_t i = 0; i < grid.size(); ++i) grid[i] = 100 + i;
    CHECK(WriteWith(path, NumberFormat::kNpy, grid, 3, dir) == grid);
    const std::string bytes = ReadBytes(path);
    const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                              (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    const std::string header = bytes.substr(10, header_len);
    CHECK(header.find("'shape': (3, 4)") != std::string::npos);
    CHECK(bytes.substr(10 + header_len) == Encode(grid, 8));
    std::unique_ptr<NumberFileReader> reader;
    REQUIRE(NumberFileReader::Open(path, &reader).ok());
    CHECK(reader->npy_rows() == 3);
    CHECK(reader->binary_count() == 12);
  }
  SECTION("an empty file of each format") {
    for (NumberFormat f :
         {NumberFormat::kText, NumberFormat::kU32, NumberFormat::kU64, NumberFormat::kNpy}) {
      const std::string path = dir.File(std::string("empty.") + NumberFormatName(f));
      CHECK(WriteWith(path, f, {}, 0, dir).empty());
    }
  }
}

TEST_CASE("NumberFileWriter replaces an existing file whole", "[number_file][writer]") {
  TempDir dir;
  const std::string path = dir.File("ids.u32");
  WriteBytes(path, Encode({9, 9, 9, 9, 9, 9, 9, 9}, 4));
  std::unique_ptr<NumberFileWriter> writer;
  REQUIRE(NumberFileWriter::Open(path, NumberFormat::kU32, 2, 0, &writer).ok());
  const uint64_t values[2] = {1, 2};
  REQUIRE(writer->Append(values, 2).ok());
  // The old file is still whole until Finish.
  CHECK(ReadBytes(path) == Encode({9, 9, 9, 9, 9, 9, 9, 9}, 4));
  REQUIRE(writer->Finish().ok());
  CHECK(ReadBytes(path) == Encode({1, 2}, 4));
  CHECK_FALSE(FileExists(path + ".tmp"));
}

TEST_CASE("NumberFileWriter reports a directory that does not exist", "[number_file][writer]") {
  TempDir dir;
  std::unique_ptr<NumberFileWriter> writer;
  Status s = NumberFileWriter::Open(dir.File("no/such/dir/x.u32"), NumberFormat::kU32, 1, 0,
                                    &writer);
  if (s.ok()) {
    // An implementation may defer the failure; it must not succeed in the end.
    const uint64_t v = 1;
    Status a = writer->Append(&v, 1);
    Status f = a.ok() ? writer->Finish() : a;
    CHECK_FALSE(f.ok());
  } else {
    CHECK(s.message().find("no/such/dir") != std::string::npos);
  }
}

}  // namespace
}  // namespace opt4store
