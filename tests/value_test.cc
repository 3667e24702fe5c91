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
  StoreSettings o;
  o.dataset_size = 123456;
  o.ram = uint64_t{3} << 30;
  o.disk = uint64_t{200} << 30;
  o.policy = PolicyKind::kLru;
  o.prefetch_depth = 777;
  o.staging = 64 << 20;
  o.compression = StoreOptions::Compression::kNone;
  o.sync = StoreOptions::SyncMode::kEveryPut;
  StoreSettings back;
  REQUIRE(DecodeManifestOptions(EncodeManifestOptions(o), &back).ok());
  CHECK(back.dataset_size == o.dataset_size);
  CHECK(back.ram == o.ram);
  CHECK(back.ram_items == 0);
  CHECK(back.disk == o.disk);
  CHECK(back.policy == PolicyKind::kLru);
  CHECK(back.prefetch_depth == 777);
  CHECK(back.staging == o.staging);
  CHECK(back.compression == StoreOptions::Compression::kNone);
  CHECK(back.sync == StoreOptions::SyncMode::kEveryPut);

  // Every setting of the table is a line named as the setting.
  const std::string text = EncodeManifestOptions(o);
  for (const SettingField& field : SettingFields()) {
    INFO(field.name);
    CHECK(text.find("\n" + std::string(field.name) + "=") != std::string::npos);
  }
  CHECK(text.find("\nram=3221225472\n") != std::string::npos);

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

TEST_CASE("a manifest written before the settings table still opens", "[manifest]") {
  // The names of the first manifests: ram_bytes, disk_bytes, staging_bytes.
  const std::string old_text =
      "dataset_size=10\nram_bytes=1048576\nram_items=0\ndisk_bytes=67108864\npolicy=opt\n"
      "prefetch_depth=512\nstaging_bytes=67108864\ncompression=auto\nsync=flush\n";
  StoreSettings s;
  REQUIRE(DecodeManifestOptions(old_text, &s).ok());
  CHECK(s.dataset_size == 10);
  CHECK(s.ram == 1048576);
  CHECK(s.disk == 67108864);
  CHECK(s.staging == 67108864);
  CHECK(s.sync == SyncMode::kOnFlush);

  // A setting missing or malformed is Corruption naming it.
  Status missing = DecodeManifestOptions("dataset_size=10\nram=1\n", &s);
  CHECK(missing.IsCorruption());
  CHECK(missing.message().find("ram_items") != std::string::npos);
  Status bad = DecodeManifestOptions(
      "dataset_size=10\nram=1\nram_items=0\ndisk=1\npolicy=best\nprefetch_depth=1\n"
      "staging=1\ncompression=auto\nsync=flush\n",
      &s);
  CHECK(bad.IsCorruption());
  CHECK(bad.message().find("best") != std::string::npos);
}

TEST_CASE("SetOption reads each setting by its kind", "[manifest]") {
  StoreOptions o;
  REQUIRE(SetOption("ram", "512MiB", &o).ok());
  CHECK(*o.ram == uint64_t{512} << 20);
  REQUIRE(SetOption("prefetch_depth", "64", &o).ok());
  CHECK(*o.prefetch_depth == 64);
  REQUIRE(SetOption("policy", "lru", &o).ok());
  CHECK(*o.policy == PolicyKind::kLru);
  // A count takes no unit; a size does; unknown names and values are named.
  Status s = SetOption("prefetch_depth", "64KiB", &o);
  CHECK(s.IsInvalidArgument());
  CHECK(s.message().find("prefetch_depth") != std::string::npos);
  CHECK(*o.prefetch_depth == 64);
  CHECK(SetOption("ram", "12XB", &o).IsInvalidArgument());
  CHECK(SetOption("sync", "sometimes", &o).IsInvalidArgument());
  Status unknown = SetOption("ram_bytes", "1", &o);
  CHECK(unknown.IsInvalidArgument());
  CHECK(unknown.message().find("ram_bytes") != std::string::npos);
}

TEST_CASE("manifest decoding reports malformed values", "[manifest]") {
  StoreSettings o;
  CHECK(DecodeManifestOptions("dataset_size=12\n", &o).IsCorruption());  // keys missing
  CHECK(DecodeManifestOptions("no equals sign\n", &o).IsCorruption());
  std::string text = EncodeManifestOptions(StoreSettings());
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
