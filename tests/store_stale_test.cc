// Stale stores: a store's fingerprint (StoreOptions::fingerprint), emptying
// a store as it opens (StoreOptions::reset) and from the CLI (`opt4store
// clear`), and Store::Peek, the read that checks a value without counting
// it. The CLI cases run the real binary (OPT4STORE_CLI).
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "json_test_util.h"
#include "opt4store/read_sink.h"
#include "opt4store/store.h"
#include "store_cli_test_util.h"
#include "store_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::CheckFails;
using opt4store_test::Cli;
using opt4store_test::CliOk;
using opt4store_test::CliResult;
using opt4store_test::CreateStore;
using opt4store_test::Json;
using opt4store_test::LogCollector;
using opt4store_test::MentionsAny;
using opt4store_test::ParseJson;
using opt4store_test::ScratchStore;
using opt4store_test::TempDir;
using opt4store_test::WriteInputDir;

constexpr uint64_t kItems = 10;

// Admin mode over the scratch store: the disk tier and the manifest only.
StoreOptions AdminOptions(std::optional<std::string> fingerprint, bool reset = false) {
  StoreOptions o;
  o.dataset_size = kItems;
  o.disk = uint64_t{16} << 20;
  o.disk_only = true;
  o.fingerprint = std::move(fingerprint);
  o.reset = reset;
  return o;
}

Status OpenWith(const StoreOptions& options, const ScratchStore& scratch,
                std::unique_ptr<Store>* store) {
  StoreOptions o = options;
  o.shm_prefix = scratch.prefix();
  return Store::Open(o, scratch.path(), store);
}

std::unique_ptr<Store> MustOpen(const StoreOptions& options, const ScratchStore& scratch) {
  std::unique_ptr<Store> store;
  const Status s = OpenWith(options, scratch, &store);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return store;
}

// Puts "<tag>:<id>" for each id, then closes.
void Fill(std::unique_ptr<Store> store, const std::string& tag, std::vector<ItemId> ids) {
  for (ItemId id : ids) {
    REQUIRE(store->Put(kNoPosition, id, "m", tag + ":" + std::to_string(id)).ok());
  }
  REQUIRE(store->Close().ok());
}

std::string Payload(Store* store, ItemId id) {
  StringSink sink;
  const Status s = store->Get(kNoPosition, id, &sink);
  return s.ok() ? sink.payload : s.ToString();
}

std::string Fingerprint(Store* store) {
  StoreInfo info;
  REQUIRE(store->Inspect(&info).ok());
  return info.settings.fingerprint;
}

TEST_CASE("Stale: another fingerprint is refused, naming both and the two fixes", "[stale]") {
  ScratchStore scratch;
  Fill(MustOpen(AdminOptions("resize256"), scratch), "v1", {0, 1, 2});

  std::unique_ptr<Store> store;
  const Status s = OpenWith(AdminOptions("resize128"), scratch, &store);
  INFO(s.ToString());
  CHECK(s.IsStale());
  CHECK(s.message().find("'resize256'") != std::string::npos);
  CHECK(s.message().find("'resize128'") != std::string::npos);
  CHECK(s.message().find("reset=True") != std::string::npos);
  CHECK(s.message().find("opt4store clear " + scratch.path()) != std::string::npos);
  CHECK(store == nullptr);

  // The same fingerprint, or none (the saved one stays), serves the values.
  for (const std::optional<std::string>& given :
       {std::optional<std::string>("resize256"), std::optional<std::string>()}) {
    store = MustOpen(AdminOptions(given), scratch);
    CHECK(Payload(store.get(), 1) == "v1:1");
    CHECK(Fingerprint(store.get()) == "resize256");
    REQUIRE(store->Close().ok());
  }
}

TEST_CASE("Stale: reset empties the store, keeps its settings and saves the new fingerprint",
          "[stale]") {
  ScratchStore scratch;
  StoreOptions first = AdminOptions("a");
  first.policy = PolicyKind::kLru;
  Fill(MustOpen(first, scratch), "v1", {0, 1, 2, 3});

  std::unique_ptr<Store> store = MustOpen(AdminOptions("b", /*reset=*/true), scratch);
  StoreInfo info;
  REQUIRE(store->Inspect(&info).ok());
  CHECK(info.settings.fingerprint == "b");
  CHECK(info.settings.policy == PolicyKind::kLru);
  CHECK(info.segments.empty());
  CHECK(store->Stats().disk_items == 0);
  CHECK(Payload(store.get(), 0).find("not found") != std::string::npos);
  Fill(std::move(store), "v2", {0, 5});

  // A new open (recovery) finds the new values only, not the old ones.
  store = MustOpen(AdminOptions("b"), scratch);
  CHECK(store->Stats().disk_items == 2);
  CHECK(Payload(store.get(), 0) == "v2:0");
  CHECK(Payload(store.get(), 5) == "v2:5");
  CHECK(Payload(store.get(), 1).find("not found") != std::string::npos);
  REQUIRE(store->Close().ok());
  std::unique_ptr<Store> stale;
  const Status s = OpenWith(AdminOptions("a"), scratch, &stale);
  INFO(s.ToString());
  CHECK(s.IsStale());
}

TEST_CASE("Stale: a store made without a fingerprint opens, and takes the first one given",
          "[stale]") {
  // A store made without a fingerprint has no "store/fingerprint" key: its
  // manifest is the one stores had before fingerprints.
  ScratchStore scratch;
  Fill(MustOpen(AdminOptions(std::nullopt), scratch), "v1", {0, 1});

  std::unique_ptr<Store> store = MustOpen(AdminOptions(std::nullopt), scratch);
  CHECK(Fingerprint(store.get()).empty());
  CHECK(Payload(store.get(), 0) == "v1:0");
  REQUIRE(store->Close().ok());

  LogCollector log;
  StoreOptions adopt = AdminOptions("x");
  adopt.info_log = log.Sink();
  store = MustOpen(adopt, scratch);
  CHECK(Fingerprint(store.get()) == "x");
  CHECK(Payload(store.get(), 0) == "v1:0");
  INFO(log.Joined());
  CHECK(MentionsAny(log.Joined(), {"had no fingerprint"}));
  REQUIRE(store->Close().ok());

  std::unique_ptr<Store> stale;
  CHECK(OpenWith(AdminOptions("y"), scratch, &stale).IsStale());
}

TEST_CASE(
    "Stale: a store that holds no values takes a new fingerprint, and an empty one is refused",
    "[stale]") {
  ScratchStore scratch;
  REQUIRE(MustOpen(AdminOptions("a"), scratch)->Close().ok());
  std::unique_ptr<Store> store = MustOpen(AdminOptions("b"), scratch);
  CHECK(Fingerprint(store.get()) == "b");
  REQUIRE(store->Close().ok());

  const Status s = OpenWith(AdminOptions(std::string()), scratch, &store);
  INFO(s.ToString());
  CHECK(s.IsInvalidArgument());
  CHECK(s.message().find("fingerprint") != std::string::npos);
}

TEST_CASE("Peek reads what a tier holds without counting an access", "[stale]") {
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = kItems;
  o.ram_items = 2;
  o.disk = uint64_t{16} << 20;
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, scratch.path(), &store).ok());
  for (ItemId id = 0; id < 6; ++id) {
    REQUIRE(store->Put(kNoPosition, id, "m", "v:" + std::to_string(id)).ok());
  }
  REQUIRE(store->Flush().ok());  // every value on the disk tier
  const StoreStats before = store->Stats();
  for (ItemId id = 0; id < 6; ++id) {
    StringSink sink;
    GetSource source = GetSource::kMiss;
    const Status s = store->Peek(id, &sink, &source);
    INFO("id " << id << ": " << s.ToString());
    REQUIRE(s.ok());
    CHECK(sink.payload == "v:" + std::to_string(id));
    CHECK(source != GetSource::kMiss);
  }
  StringSink sink;
  CHECK(store->Peek(7, &sink).IsNotFound());
  CHECK(store->Peek(kItems, &sink).IsOutOfRange());
  const StoreStats after = store->Stats();
  CHECK(after.accesses == before.accesses);
  CHECK(after.hits_ram == before.hits_ram);
  CHECK(after.hits_disk == before.hits_disk);
  CHECK(after.source_loads == before.source_loads);
  CHECK(after.ram_items == before.ram_items);
  // A Get counts.
  REQUIRE(store->Get(kNoPosition, 0, &sink).ok());
  CHECK(store->Stats().accesses == before.accesses + 1);
  REQUIRE(store->Close().ok());
}

// ---------------------------------------------------------------- opt4store clear

TEST_CASE("clear empties the values and keeps the settings and the fingerprint",
          "[store_cli][clear]") {
  TempDir dir;
  const std::string store =
      CreateStore(dir, 10, {"--policy", "lru", "--fingerprint", "resize256-v1"});
  const auto files = WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});
  const Json before = ParseJson(CliOk(dir, {"inspect", store, "--json"}));
  REQUIRE(before.at("tiers").at("disk_items") == 3);
  CHECK(before.at("fingerprint") == "resize256-v1");

  const std::string out = CliOk(dir, {"clear", store});
  INFO(out);
  CHECK(out.find("cleared " + store) != std::string::npos);
  CHECK(out.find("3 items") != std::string::npos);
  CHECK(out.find("'resize256-v1'") != std::string::npos);

  // Reopened by another process (recovery): nothing comes back.
  const Json after = ParseJson(CliOk(dir, {"inspect", store, "--json"}));
  CHECK(after.at("tiers").at("disk_items") == 0);
  CHECK(after.at("tiers").at("disk_file_bytes") == 0);
  CHECK(after.at("segments").empty());
  for (const char* key : {"dataset_size", "fingerprint", "plan", "ram", "ram_items", "disk",
                          "policy", "prefetch_depth", "staging", "compression", "sync"}) {
    INFO(key);
    CHECK(after.at(key) == before.at(key));
  }
  size_t segment_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(store + "/segments")) {
    segment_files += e.path().extension() == ".seg";
  }
  CHECK(segment_files == 0);
  CheckFails(Cli(dir, {"get", store, "0", "-o", dir.File("zero")}));

  // The cleared store takes new values.
  CliOk(dir, {"import", store, "--from", dir.File("in")});
  CHECK(CliOk(dir, {"get", store, "2", "-o", "-"}) == files[2].second);
  CliOk(dir, {"verify", store});
}

TEST_CASE("clear refuses while another process owns the store, and clears nothing",
          "[store_cli][clear]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  const auto files = WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});
  StoreOptions options;
  options.create_if_missing = false;
  options.disk_only = true;
  std::unique_ptr<Store> held;
  REQUIRE(Store::Open(options, store, &held).ok());

  const CliResult r = Cli(dir, {"clear", store});
  CheckFails(r);
  CHECK(MentionsAny(r.err, {"another process"}));
  REQUIRE(held->Close().ok());
  held.reset();
  CHECK(CliOk(dir, {"get", store, "0", "-o", "-"}) == files[0].second);

  CliResult none = Cli(dir, {"clear", dir.File("nothing-here")});
  CheckFails(none);
  CHECK(MentionsAny(none.err, {"no store"}));
}

}  // namespace
}  // namespace opt4store
