// NpyHeader: the one .npy header reader (engine/base/npy_header.h) that the
// number files and the CLI's import share. Headers are written here byte by
// byte after the NPY format specification; the errors must name the file
// and the offset where the framing breaks.
#include "engine/base/npy_header.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::LE;
using opt4store_test::MentionsAny;
using opt4store_test::NamesNumber;
using opt4store_test::TempDir;
using opt4store_test::WriteBytes;

// Magic, version major.minor, the header length (2 bytes for 1.0, 4 for 2.0
// and 3.0), then the dict and a newline, unpadded.
std::string Framed(const std::string& dict, int major = 1) {
  const std::string text = dict + "\n";
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  out += LE(text.size(), major == 1 ? 2 : 4);
  return out + text;
}

struct ReadResult {
  Status status;
  NpyHeader header;
  long position = -1;  // the file's offset after the read
};

ReadResult Read(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.File("h.npy");
  WriteBytes(path, bytes);
  ReadResult r;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  r.status = ReadNpyHeader(path, f, &r.header);
  r.position = std::ftell(f);
  std::fclose(f);
  return r;
}

TEST_CASE("NpyHeader: the dict as numpy and other writers lay it out", "[npy_header]") {
  NpyHeader h;
  REQUIRE(ParseNpyHeaderDict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", &h)
              .ok());
  CHECK(h.descr == "<f4");
  CHECK_FALSE(h.fortran_order);
  CHECK(h.shape == std::vector<uint64_t>{3, 4});

  REQUIRE(ParseNpyHeaderDict("{\"shape\":(7,),\"fortran_order\":True,\"descr\":\"|u1\"}", &h).ok());
  CHECK(h.descr == "|u1");
  CHECK(h.fortran_order);
  CHECK(h.shape == std::vector<uint64_t>{7});

  REQUIRE(ParseNpyHeaderDict("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", &h).ok());
  CHECK(h.shape.empty());

  SECTION("Python 2 wrote longs with an L") {
    REQUIRE(ParseNpyHeaderDict("{'descr': '<i8', 'fortran_order': False, 'shape': (2L, 3L), }",
                               &h)
                .ok());
    CHECK(h.shape == std::vector<uint64_t>{2, 3});
  }
  SECTION("a structured dtype is kept whole") {
    REQUIRE(ParseNpyHeaderDict(
                "{'descr': [('x', '<f4'), ('y', '<i2')], 'fortran_order': False, 'shape': (2,), }",
                &h)
                .ok());
    CHECK(h.descr == "[('x', '<f4'), ('y', '<i2')]");
  }
}

TEST_CASE("NpyHeader: malformed dicts say where", "[npy_header]") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"'descr': '<f4'}", {"expected '{'"}},
      {"{'descx': '<f4', 'fortran_order': False, 'shape': (2,)}", {"unexpected key"}},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", {"fortran_order"}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}", {"non-integer"}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
       {"overflows"}},
      {"{'descr': '<f4', 'fortran_order': False}", {"lacks 'shape'"}},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", {"expected"}},
  };
  for (const auto& [text, words] : cases) {
    INFO(text);
    NpyHeader h;
    Status s = ParseNpyHeaderDict(text, &h);
    INFO(s.ToString());
    CHECK(s.IsCorruption());
    CHECK(MentionsAny(s.message(), words));
  }
  NpyHeader h;
  Status s = ParseNpyHeaderDict("{'descr': '<f4', 'shape' (2,)}", &h);
  CHECK(s.message().find("at character 25") != std::string::npos);
}

TEST_CASE("NpyHeader: versions 1.0 to 3.0 and where the data starts", "[npy_header]") {
  TempDir dir;
  const std::string dict = "{'descr': '<u8', 'fortran_order': False, 'shape': (2, 5), }";
  for (int major : {1, 2, 3}) {
    INFO("version " << major);
    const std::string bytes = Framed(dict, major);
    ReadResult r = Read(dir, bytes + std::string(80, '\0'));
    INFO(r.status.ToString());
    REQUIRE(r.status.ok());
    CHECK(r.header.major_version == major);
    CHECK(r.header.descr == "<u8");
    CHECK(r.header.shape == std::vector<uint64_t>{2, 5});
    CHECK(r.header.data_offset == bytes.size());
    CHECK(r.position == static_cast<long>(bytes.size()));
    CHECK(CheckNpyFileSize("h.npy", r.header, 8, bytes.size() + 80).ok());
  }
}

TEST_CASE("NpyHeader: broken framing names the offset", "[npy_header]") {
  TempDir dir;
  const std::string path = dir.File("h.npy");
  const std::string dict = "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }";
  const std::string good = Framed(dict);

  ReadResult no_magic = Read(dir, "just text, not an array");
  CHECK(no_magic.status.IsCorruption());
  CHECK(no_magic.status.message().find(path) != std::string::npos);
  CHECK(MentionsAny(no_magic.status.message(), {"magic at offset 0"}));

  ReadResult short_file = Read(dir, good.substr(0, 7));
  CHECK(MentionsAny(short_file.status.message(), {"magic at offset 0"}));

  ReadResult v2_no_length = Read(dir, Framed(dict, 2).substr(0, 11));
  CHECK(v2_no_length.status.IsCorruption());
  CHECK(MentionsAny(v2_no_length.status.message(), {"truncated .npy header at offset 10"}));

  ReadResult cut_dict = Read(dir, good.substr(0, 30));
  CHECK(cut_dict.status.IsCorruption());
  CHECK(MentionsAny(cut_dict.status.message(), {"truncated .npy header at offset 10"}));

  std::string v4 = good;
  v4[6] = 4;
  ReadResult version = Read(dir, v4);
  CHECK(version.status.IsNotSupported());
  CHECK(MentionsAny(version.status.message(), {"version 4.0"}));

  std::string huge = Framed(dict, 2);
  huge.replace(8, 4, LE(uint64_t{1} << 30, 4));
  ReadResult length = Read(dir, huge);
  CHECK(length.status.IsCorruption());
  CHECK(MentionsAny(length.status.message(), {"at offset 8"}));

  std::string bad_dict = good;
  bad_dict.replace(10, 8, "{'descx'");
  ReadResult malformed = Read(dir, bad_dict);
  CHECK(malformed.status.IsCorruption());
  CHECK(malformed.status.message().find(path + ": malformed .npy header") != std::string::npos);
}

TEST_CASE("NpyHeader: the file size must match the shape", "[npy_header]") {
  NpyHeader h;
  h.shape = {3, 4};
  h.data_offset = 64;
  uint64_t bytes = 0;
  REQUIRE(NpyDataBytes("f.npy", h, 2, &bytes).ok());
  CHECK(bytes == 24);
  CHECK(CheckNpyFileSize("f.npy", h, 2, 64 + 24).ok());

  Status shorter = CheckNpyFileSize("f.npy", h, 2, 64 + 20);
  INFO(shorter.ToString());
  CHECK(shorter.IsCorruption());
  CHECK(NamesNumber(shorter.message(), 20));
  CHECK(NamesNumber(shorter.message(), 24));
  CHECK(shorter.message().find("mismatch at offset 84") != std::string::npos);

  Status longer = CheckNpyFileSize("f.npy", h, 2, 64 + 30);
  CHECK(longer.message().find("mismatch at offset 88") != std::string::npos);

  h.shape = {};  // 0-d: one element
  REQUIRE(NpyDataBytes("f.npy", h, 8, &bytes).ok());
  CHECK(bytes == 8);
  h.shape = {uint64_t{1} << 40, uint64_t{1} << 30};
  CHECK(MentionsAny(NpyDataBytes("f.npy", h, 1, &bytes).message(), {"overflows"}));
  CHECK(CheckNpyFileSize("f.npy", h, 1, 100).IsCorruption());
  h.shape = {0, uint64_t{1} << 40, uint64_t{1} << 40};  // no bytes at all
  REQUIRE(NpyDataBytes("f.npy", h, 8, &bytes).ok());
  CHECK(bytes == 0);
}

TEST_CASE("NpyHeader: what EncodeNpyHeader writes reads back", "[npy_header]") {
  TempDir dir;
  const std::vector<std::vector<uint64_t>> shapes = {{}, {0}, {7}, {3, 4}, {2, 3, 4}};
  for (const std::vector<uint64_t>& shape : shapes) {
    INFO("rank " << shape.size());
    const std::string head = EncodeNpyHeader("<i8", shape);
    CHECK(head.size() % 64 == 0);  // numpy aligns the data to 64 bytes
    CHECK(head.back() == '\n');
    ReadResult r = Read(dir, head);
    INFO(r.status.ToString());
    REQUIRE(r.status.ok());
    CHECK(r.header.major_version == 1);
    CHECK(r.header.descr == "<i8");
    CHECK_FALSE(r.header.fortran_order);
    CHECK(r.header.shape == shape);
    CHECK(r.header.data_offset == head.size());
  }
  // numpy's own text for a 1-D array keeps the tuple's trailing comma.
  CHECK(EncodeNpyHeader("<i8", {5}).find("'shape': (5,), }") != std::string::npos);
}

}  // namespace
}  // namespace opt4store
