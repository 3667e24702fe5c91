// `opt4store stats` and `inspect` on a store that a process owns now
// (opt4store/live_store.h): they read the owner's control block and RAM tier
// read-only and its disk index as a RocksDB secondary, show the same
// counters as the owner's Stats(), and leave every file of the store as it
// was. A killed owner's OWNER file is ignored; the other admin commands
// stay Busy, naming the owner's pid.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "fork_child.h"
#include "json_test_util.h"
#include "opt4store/live_store.h"
#include "opt4store/read_sink.h"
#include "opt4store/store.h"
#include "opt4store/store_stats.h"
#include "store_cli_test_util.h"
#include "test_util.h"

namespace {

using opt4store::ItemId;
using opt4store::kNoPosition;
using opt4store::LiveStore;
using opt4store::Status;
using opt4store::Store;
using opt4store::StoreOptions;
using opt4store::StoreStats;
using opt4store_test::CheckFails;
using opt4store_test::Cli;
using opt4store_test::CliOk;
using opt4store_test::CliResult;
using opt4store_test::CreateStore;
using opt4store_test::Json;
using opt4store_test::ParseJson;
using opt4store_test::ReadBytes;
using opt4store_test::TempDir;
using opt4store_test::WriteInputDir;

// Every file under dir but OWNER, by its path, with its bytes.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string rel = std::filesystem::relative(e.path(), dir).string();
    if (rel == "OWNER") continue;
    files[rel] = e.is_regular_file() ? ReadBytes(e.path().string()) : std::string("<dir>");
  }
  return files;
}

// Opens the store as its owner and serves some reads: 4 loads, then 6 hits
// and a miss. No Catch2 here: a forked child calls it too.
Status OwnAndServe(const std::string& path, std::unique_ptr<Store>* out) {
  StoreOptions options;
  options.create_if_missing = false;
  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(Store::Open(options, path, &store));
  for (ItemId id = 0; id < 4; ++id) {
    OPT4STORE_RETURN_IF_ERROR(
        store->Put(kNoPosition, id, "m", std::string(1000 + id, static_cast<char>('a' + id))));
  }
  for (int round = 0; round < 2; ++round) {
    for (ItemId id = 1; id < 4; ++id) {
      opt4store::StringSink sink;
      OPT4STORE_RETURN_IF_ERROR(store->Get(kNoPosition, id, &sink));
    }
  }
  opt4store::StringSink sink;
  if (!store->Get(kNoPosition, 7, &sink).IsNotFound()) return Status::Corruption("7 was found");
  *out = std::move(store);
  return Status::OK();
}

std::unique_ptr<Store> MustOwnAndServe(const std::string& path) {
  std::unique_ptr<Store> store;
  Status s = OwnAndServe(path, &store);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return store;
}

// Every field of the JSON equals the stats' field of the same name.
void CheckSameStats(const Json& json, const StoreStats& st) {
  opt4store::VisitStats(st, [&](const opt4store::StatField& field, auto value) {
    INFO(field.name);
    REQUIRE(json.contains(field.name));
    if constexpr (std::is_floating_point_v<decltype(value)>) {
      CHECK(json.at(field.name).get<double>() == Approx(value));
    } else {
      CHECK(json.at(field.name).get<decltype(value)>() == value);
    }
  });
}

}  // namespace

TEST_CASE("stats and inspect read a store in use, live, and change none of its files",
          "[store_live]") {
  TempDir dir;
  const std::string path = CreateStore(dir, 10);
  std::unique_ptr<Store> owner = MustOwnAndServe(path);
  const StoreStats st = owner->Stats();
  REQUIRE(st.live);
  REQUIRE(st.owner_pid == static_cast<uint64_t>(getpid()));
  REQUIRE(st.hits_ram + st.hits_disk == 6);
  REQUIRE(st.source_loads == 1);
  REQUIRE(st.disk_items == 4);
  REQUIRE(std::filesystem::exists(path + "/OWNER"));
  const auto before = Snapshot(path);

  const Json json = ParseJson(CliOk(dir, {"stats", path, "--json"}));
  CheckSameStats(json, st);
  CHECK(json.at("last_run") == false);
  const std::string table = CliOk(dir, {"stats", path});
  INFO(table);
  CHECK(table.rfind("live: the store is open, owned by pid " + std::to_string(getpid()) + "\n", 0) ==
        0);

  const Json ij = ParseJson(CliOk(dir, {"inspect", path, "--json"}));
  CHECK(ij.at("live") == true);
  CHECK(ij.at("owner_pid") == getpid());
  CHECK(ij.at("dataset_size") == 10);
  CHECK(ij.at("ram") == 1 << 20);
  CHECK(ij.at("tiers").at("disk_items") == 4);
  CHECK(ij.at("tiers").at("ram_items") == st.ram_items);
  size_t files = 0;
  uint64_t live_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(path + "/segments")) {
    if (e.path().extension() == ".seg") ++files;
  }
  for (const Json& seg : ij.at("segments")) live_bytes += seg.at("live_bytes").get<uint64_t>();
  CHECK(ij.at("segments").size() == files);
  CHECK(live_bytes == st.disk_live_bytes);
  const std::string text = CliOk(dir, {"inspect", path});
  CHECK(text.find("owner:          pid " + std::to_string(getpid()) + " (live") !=
        std::string::npos);

  // The others still refuse, naming the owner.
  WriteInputDir(dir);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"verify", path}, {"compact", path}, {"clear", path}, {"repair", path},
           {"import", path, "--from", dir.File("in")}}) {
    INFO(args[0]);
    CliResult r = Cli(dir, args);
    CheckFails(r);
    CHECK(r.err.find("another process, pid " + std::to_string(getpid())) != std::string::npos);
  }
  CHECK(Snapshot(path) == before);

  // Closed: the file goes, and the CLI shows the run's saved counters.
  REQUIRE(owner->Close().ok());
  CHECK(!std::filesystem::exists(path + "/OWNER"));
  const Json closed = ParseJson(CliOk(dir, {"stats", path, "--json"}));
  CHECK(closed.at("live") == false);
  CHECK(closed.at("owner_pid") == 0);
  CHECK(closed.at("last_run") == true);
  CHECK(closed.at("hits_ram") == st.hits_ram);
  CHECK(closed.at("accesses") == st.accesses);
  CHECK(CliOk(dir, {"stats", path}).rfind("last run: ", 0) == 0);
}

TEST_CASE("LiveStore reads another process's store; a killed owner's file is ignored",
          "[store_live]") {
  TempDir dir;
  const std::string path = CreateStore(dir, 10);
  int go[2];
  REQUIRE(pipe(go) == 0);
  opt4store_test::Child child = opt4store_test::ForkChild([&](int report) {
    close(go[1]);
    std::unique_ptr<Store> store;
    if (!OwnAndServe(path, &store).ok()) return 1;
    const StoreStats st = store->Stats();
    const uint64_t hits = st.hits_ram + st.hits_disk;
    if (write(report, &hits, sizeof(hits)) != sizeof(hits)) return 1;
    char c;
    while (read(go[0], &c, 1) < 0) {  // until the parent is done or kills us
    }
    return 0;
  });
  close(go[0]);
  uint64_t hits = 0;
  REQUIRE(read(child.fd, &hits, sizeof(hits)) == sizeof(hits));
  CHECK(hits == 6);

  std::unique_ptr<LiveStore> live;
  Status s = LiveStore::Open(path, &live);
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(live->owner_pid() == child.pid);
  const StoreStats st = live->Stats();
  CHECK(st.live);
  CHECK(st.owner_pid == static_cast<uint64_t>(child.pid));
  CHECK(st.hits_ram + st.hits_disk == hits);
  CHECK(st.accesses == 7);
  const Json json = ParseJson(CliOk(dir, {"stats", path, "--json"}));
  CHECK(json.at("owner_pid") == child.pid);
  CHECK(json.at("hits_ram").get<uint64_t>() + json.at("hits_disk").get<uint64_t>() == 6);
  live.reset();

  // kill -9: OWNER stays behind, naming a dead pid.
  REQUIRE(kill(child.pid, SIGKILL) == 0);
  opt4store_test::Reap(child.pid);
  close(go[1]);
  close(child.fd);
  REQUIRE(std::filesystem::exists(path + "/OWNER"));
  CHECK(LiveStore::Open(path, &live).IsNotFound());
  const Json after = ParseJson(CliOk(dir, {"stats", path, "--json"}));
  CHECK(after.at("live") == false);
  CHECK(after.at("owner_pid") == 0);
  CHECK(after.at("disk_items").get<uint64_t>() <= 4);  // unsynced Puts may be lost
  const Json ij = ParseJson(CliOk(dir, {"inspect", path, "--json"}));
  CHECK(ij.at("live") == false);
  CliOk(dir, {"verify", path});
  // The next owner replaces the file with its own.
  std::unique_ptr<Store> next = MustOwnAndServe(path);
  REQUIRE(LiveStore::Open(path, &live).ok());
  CHECK(live->owner_pid() == getpid());
  live.reset();
  REQUIRE(next->Close().ok());
  CHECK(!std::filesystem::exists(path + "/OWNER"));
}

TEST_CASE("peer traffic counted in any process shows in Stats, the CLI, and the last run's",
          "[store_live]") {
  TempDir dir;
  const std::string path = CreateStore(dir, 10);
  // Another process adds to the same shared counters (a cluster host's
  // processes all count into its store). It is forked before the owner
  // opens the store (fork_child.h) and joins with the handle it is sent.
  opt4store_test::WaitingChild child =
      opt4store_test::ForkWaitingChild([](int, const std::string& handle) {
        std::unique_ptr<Store> store;
        if (!Store::Attach(handle, &store).ok()) return 1;
        store->CountPeerTraffic(1, 500, 7000);
        return 0;
      });
  std::unique_ptr<Store> owner = MustOwnAndServe(path);
  owner->CountPeerTraffic(2, 3000, 0);
  REQUIRE(opt4store_test::Go(&child, owner->handle()));
  const int status = opt4store_test::Reap(child.pid);
  close(child.fd);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const StoreStats st = owner->Stats();
  CHECK(st.peer_hits == 3);
  CHECK(st.peer_bytes_in == 3500);
  CHECK(st.peer_bytes_out == 7000);
  const Json live = ParseJson(CliOk(dir, {"stats", path, "--json"}));
  CHECK(live.at("peer_hits") == 3);
  CHECK(live.at("peer_bytes_out") == 7000);
  CHECK(CliOk(dir, {"stats", path}).find("peer_hits") != std::string::npos);

  REQUIRE(owner->Close().ok());
  owner->CountPeerTraffic(5, 5, 5);  // closed: counts nothing
  const Json closed = ParseJson(CliOk(dir, {"stats", path, "--json"}));
  CHECK(closed.at("last_run") == true);
  CHECK(closed.at("peer_hits") == 3);
  CHECK(closed.at("peer_bytes_in") == 3500);
  CHECK(closed.at("peer_bytes_out") == 7000);
}
