// The value header (value.h) and the store's manifest encodings.
#include <catch2/catch.hpp>

#include <string>

#include "opt4store/value.h"
#include "engine/store/manifest.h"

namespace opt4store {
namespace {

TEST_CASE("value header round-trips every dtype, shape and user bytes", "[value]") {
  const DType dtypes[] = {DType::kBytes,   DType::kBool,      DType::kUInt8,     DType::kInt8,
                          DType::kInt16,   DType::kInt32,     DType::kInt64,     DType::kFloat16,
                          DType::kBFloat16, DType::kFloat32,  DType::kFloat64,   DType::kComplex64,
                          DType::kComplex128, DType::kUInt16, DType::kUInt32,    DType::kUInt64};
  for (DType dtype : dtypes) {
    ValueHeader h;
    h.dtype = dtype;
    h.shape = {3, 64, 64};
    h.tag = 0xDEADBEEF;
    h.user = std::string("a\0b", 3);
    ValueHeader back;
    REQUIRE(DecodeValueHeader(EncodeValueHeader(h), &back).ok());
    CHECK(back.dtype == dtype);
    CHECK(back.shape == h.shape);
    CHECK(back.tag == h.tag);
    CHECK(back.user == h.user);
    CHECK(back.PayloadBytes() == 3 * 64 * 64 * DTypeSize(dtype));
  }
  ValueHeader scalar;
  scalar.dtype = DType::kFloat64;
  ValueHeader back;
  REQUIRE(DecodeValueHeader(EncodeValueHeader(scalar), &back).ok());
  CHECK(back.shape.empty());
  CHECK(back.NumElements() == 1);
  CHECK(back.PayloadBytes() == 8);
}

TEST_CASE("value header rejects foreign and truncated bytes", "[value]") {
  ValueHeader h;
  CHECK(DecodeValueHeader("", &h).IsCorruption());
  CHECK(DecodeValueHeader("not a header at all", &h).IsCorruption());
  ValueHeader four;
  four.dtype = DType::kInt32;
  four.shape = {1, 2, 3, 4};
  const std::string meta = EncodeValueHeader(four);
  CHECK(DecodeValueHeader(meta.substr(0, meta.size() - 1), &h).IsCorruption());
  std::string bad_version = meta;
  bad_version[1] = 9;
  CHECK(DecodeValueHeader(bad_version, &h).IsCorruption());
  std::string bad_dtype = meta;
  bad_dtype[2] = 99;
  CHECK(DecodeValueHeader(bad_dtype, &h).IsCorruption());
}

TEST_CASE("dtype names and numpy codes parse", "[value]") {
  DType d;
  REQUIRE(ParseDType("float32", &d).ok());
  CHECK(d == DType::kFloat32);
  REQUIRE(ParseDType("<f4", &d).ok());
  CHECK(d == DType::kFloat32);
  REQUIRE(ParseDType("|u1", &d).ok());
  CHECK(d == DType::kUInt8);
  REQUIRE(ParseDType("<u1", &d).ok());
  CHECK(d == DType::kUInt8);
  REQUIRE(ParseDType("|b1", &d).ok());
  CHECK(d == DType::kBool);
  CHECK(ParseDType(">f4", &d).IsInvalidArgument());
  CHECK(ParseDType("float128", &d).IsInvalidArgument());
  CHECK(std::string(DTypeName(DType::kBFloat16)) == "bfloat16");
}

TEST_CASE("manifest options, plan and cursor round-trip", "[manifest]") {
  ManifestOptions o;
  o.dataset_size = 123456;
  o.ram_bytes = uint64_t{3} << 30;
  o.disk_bytes = uint64_t{200} << 30;
  o.policy = PolicyKind::kLru;
  o.prefetch_depth = 777;
  o.staging_bytes = 64 << 20;
  o.compression = StoreOptions::Compression::kNone;
  o.sync = StoreOptions::SyncMode::kEveryPut;
  ManifestOptions back;
  REQUIRE(DecodeManifestOptions(EncodeManifestOptions(o), &back).ok());
  CHECK(back.dataset_size == o.dataset_size);
  CHECK(back.ram_bytes == o.ram_bytes);
  CHECK(back.ram_items == 0);
  CHECK(back.disk_bytes == o.disk_bytes);
  CHECK(back.policy == PolicyKind::kLru);
  CHECK(back.prefetch_depth == 777);
  CHECK(back.staging_bytes == o.staging_bytes);
  CHECK(back.compression == StoreOptions::Compression::kNone);
  CHECK(back.sync == StoreOptions::SyncMode::kEveryPut);

  PlanSpec p;
  p.kind = SamplerKind::kDistributed;
  p.dataset_size = 1000;
  p.epochs = 7;
  p.seed = 99;
  p.world_size = 8;
  p.rank = 3;
  p.drop_last = true;
  PlanSpec pb;
  REQUIRE(DecodePlanSpec(EncodePlanSpec(p), &pb).ok());
  CHECK(pb.Describe() == p.Describe());

  PlanSpec f;
  f.kind = SamplerKind::kFile;
  f.path = "/data/plan with spaces.npy";
  f.epoch_length = 500;
  REQUIRE(DecodePlanSpec(EncodePlanSpec(f), &pb).ok());
  CHECK(pb.path == f.path);
  CHECK(pb.epoch_length == 500);
  PlanSpec explicit_plan;
  explicit_plan.kind = SamplerKind::kExplicit;
  CHECK_FALSE(PlanIsPersistable(explicit_plan));

  Cursor c{p.Describe(), 4242, 1000};
  Cursor cb;
  REQUIRE(DecodeCursor(EncodeCursor(c), &cb).ok());
  CHECK(cb.plan == c.plan);
  CHECK(cb.position == 4242);
  CHECK(cb.epoch_length == 1000);
  // A cursor written before epoch_length existed still reads.
  REQUIRE(DecodeCursor("plan=x\nposition=7\n", &cb).ok());
  CHECK(cb.position == 7);
  CHECK(cb.epoch_length == 0);
}

TEST_CASE("manifest decoding reports malformed values", "[manifest]") {
  ManifestOptions o;
  CHECK(DecodeManifestOptions("dataset_size=12\n", &o).IsCorruption());  // keys missing
  CHECK(DecodeManifestOptions("no equals sign\n", &o).IsCorruption());
  std::string text = EncodeManifestOptions(ManifestOptions());
  std::string bad = text;
  bad.replace(bad.find("dataset_size=0"), 14, "dataset_size=-5");
  CHECK(DecodeManifestOptions(bad, &o).IsCorruption());
  bad = text;
  bad.replace(bad.find("policy=opt"), 10, "policy=belady");
  CHECK(DecodeManifestOptions(bad, &o).IsCorruption());
  PlanSpec p;
  CHECK(DecodePlanSpec("kind=zigzag\n", &p).IsCorruption());
}

}  // namespace
}  // namespace opt4store
