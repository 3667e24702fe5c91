// Status: codes, messages, ToString, WithContext, copy/move, FromErrno.
#include "opt4store/status.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace opt4store {
namespace {

using Code = Status::Code;

struct Factory {
  Code code;
  Status (*make)(std::string_view);
};

const std::vector<Factory>& Factories() {
  static const std::vector<Factory> kFactories = {
      {Code::kNotFound, &Status::NotFound},
      {Code::kCorruption, &Status::Corruption},
      {Code::kInvalidArgument, &Status::InvalidArgument},
      {Code::kIOError, &Status::IOError},
      {Code::kNoSpace, &Status::NoSpace},
      {Code::kBusy, &Status::Busy},
      {Code::kOutOfRange, &Status::OutOfRange},
      {Code::kNotSupported, &Status::NotSupported},
      {Code::kStale, &Status::Stale},
  };
  return kFactories;
}

// Every predicate, so that a test can check that exactly one is true.
std::vector<bool> Predicates(const Status& s) {
  return {s.IsNotFound(), s.IsCorruption(), s.IsInvalidArgument(), s.IsIOError(),
          s.IsNoSpace(),  s.IsBusy(),       s.IsOutOfRange(),      s.IsNotSupported(),
          s.IsStale()};
}

TEST_CASE("An OK status is a null pointer with no message", "[status]") {
  Status s;
  CHECK(s.ok());
  CHECK(s.code() == Code::kOk);
  CHECK(s.message().empty());
  CHECK(s.ToString() == "OK");
  for (bool p : Predicates(s)) CHECK_FALSE(p);
  CHECK(Status::OK().ok());
  CHECK(Status::OK().ToString() == "OK");
  // "An OK status holds a null pointer and costs nothing."
  STATIC_REQUIRE(sizeof(Status) == sizeof(void*));
}

TEST_CASE("Each factory sets its code, its predicate and its message", "[status]") {
  const auto& factories = Factories();
  for (size_t i = 0; i < factories.size(); ++i) {
    const Factory& f = factories[i];
    const std::string msg = "item 42 of /data/x.bin";
    Status s = f.make(msg);
    INFO("code " << static_cast<int>(f.code));
    CHECK_FALSE(s.ok());
    CHECK(s.code() == f.code);
    CHECK(s.message() == msg);
    // Exactly the matching predicate is true.
    std::vector<bool> preds = Predicates(s);
    for (size_t j = 0; j < preds.size(); ++j) CHECK(preds[j] == (i == j));
    // "<code name>: <message>".
    CHECK(s.ToString() == std::string(CodeName(f.code)) + ": " + msg);
  }
}

TEST_CASE("An error with an empty message is still an error", "[status]") {
  Status s = Status::IOError("");
  CHECK_FALSE(s.ok());
  CHECK(s.IsIOError());
  CHECK(s.message().empty());
  CHECK(s.ToString() == std::string(CodeName(Code::kIOError)) + ": ");
}

TEST_CASE("CodeName gives a distinct non-empty name to every code", "[status]") {
  std::vector<std::string> names;
  names.push_back(CodeName(Code::kOk));
  for (const Factory& f : Factories()) names.push_back(CodeName(f.code));
  CHECK(names[0] == "OK");
  for (size_t i = 0; i < names.size(); ++i) {
    CHECK_FALSE(names[i].empty());
    for (size_t j = i + 1; j < names.size(); ++j) CHECK(names[i] != names[j]);
  }
}

TEST_CASE("WithContext prefixes the message and keeps the code", "[status]") {
  Status s = Status::Corruption("bad crc at offset 4096");
  Status c = s.WithContext("segment 7");
  CHECK(c.IsCorruption());
  CHECK(c.message() == "segment 7: bad crc at offset 4096");
  CHECK(c.ToString() == std::string(CodeName(Code::kCorruption)) +
                            ": segment 7: bad crc at offset 4096");
  // The original is untouched.
  CHECK(s.message() == "bad crc at offset 4096");
  // Contexts nest outermost first.
  Status cc = c.WithContext("open /x");
  CHECK(cc.message() == "open /x: segment 7: bad crc at offset 4096");
  CHECK(cc.IsCorruption());
  // OK stays OK, with no message.
  Status ok = Status::OK().WithContext("ignored");
  CHECK(ok.ok());
  CHECK(ok.message().empty());
}

TEST_CASE("Copies are deep and independent", "[status]") {
  Status a = Status::NotFound("a");
  Status b = a;  // copy construction
  CHECK(b.IsNotFound());
  CHECK(b.message() == "a");
  CHECK(&b.message() != &a.message());  // not shared
  b = Status::Busy("b");  // copy/move assignment does not touch a
  CHECK(a.IsNotFound());
  CHECK(a.message() == "a");
  CHECK(b.IsBusy());
  CHECK(b.message() == "b");

  Status c = Status::OK();
  c = a;  // assign error over OK
  CHECK(c.IsNotFound());
  CHECK(c.message() == "a");
  const Status ok;
  c = ok;  // assign OK over error
  CHECK(c.ok());
  CHECK(c.message().empty());

  Status d = Status::OutOfRange("self");
  const Status& d_ref = d;
  d = d_ref;  // self-assignment keeps the value
  CHECK(d.IsOutOfRange());
  CHECK(d.message() == "self");

  Status e(ok);  // copy of OK
  CHECK(e.ok());
}

TEST_CASE("Moves carry the code and message", "[status]") {
  Status a = Status::NoSpace("disk full");
  Status b(std::move(a));
  CHECK(b.IsNoSpace());
  CHECK(b.message() == "disk full");
  Status c;
  c = std::move(b);
  CHECK(c.IsNoSpace());
  CHECK(c.message() == "disk full");
  std::vector<Status> v;
  for (int i = 0; i < 100; ++i) v.push_back(Status::IOError(std::to_string(i)));
  for (int i = 0; i < 100; ++i) CHECK(v[i].message() == std::to_string(i));
}

TEST_CASE("FromErrno maps ENOSPC to NoSpace and adds strerror's text", "[status]") {
  Status s = Status::FromErrno("write /store/seg-0001", ENOSPC);
  CHECK(s.IsNoSpace());
  CHECK(s.message().find("write /store/seg-0001") != std::string::npos);
  CHECK(s.message().find(std::strerror(ENOSPC)) != std::string::npos);

  Status io = Status::FromErrno("read /store/seg-0002", EIO);
  CHECK(io.IsIOError());
  CHECK(io.message().find("read /store/seg-0002") != std::string::npos);
  CHECK(io.message().find(std::strerror(EIO)) != std::string::npos);

  Status nf = Status::FromErrno("open /nope", ENOENT);
  CHECK(nf.IsNotFound());
  CHECK(nf.message().find("/nope") != std::string::npos);
}

Status FailsAt(int step, int* reached) {
  for (int i = 0; i < 5; ++i) {
    *reached = i;
    OPT4STORE_RETURN_IF_ERROR(i == step ? Status::Busy("step " + std::to_string(i))
                                        : Status::OK());
  }
  return Status::OK();
}

TEST_CASE("OPT4STORE_RETURN_IF_ERROR returns the first error and nothing else", "[status]") {
  int reached = -1;
  Status s = FailsAt(2, &reached);
  CHECK(s.IsBusy());
  CHECK(s.message() == "step 2");
  CHECK(reached == 2);
  Status ok = FailsAt(99, &reached);
  CHECK(ok.ok());
  CHECK(reached == 4);
}

}  // namespace
}  // namespace opt4store
