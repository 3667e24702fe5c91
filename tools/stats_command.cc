// opt4store stats: the store's counters and gauges (Store::Stats()).
// A store a process owns now is read live and read-only (LiveStore: live
// yes, owner_pid). A closed one is opened in admin mode, with no readers
// and no planner: the counters shown are the ones the last run saved when
// it closed (last_run yes); the disk tier's gauges are read from the store.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/live_store.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "store_admin.h"

namespace opt4store {

namespace {

struct StatsCommandOptions {
  std::string path;
  bool json = false;
};

Status RunStats(const StatsCommandOptions& o) {
  StoreStats stats;
  std::unique_ptr<LiveStore> live;
  FindLiveStore(o.path, &live);
  if (live) {
    stats = live->Stats();
  } else {
    std::unique_ptr<Store> store;
    OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
    stats = store->Stats();
    OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));
  }
  if (o.json) return WriteStdout(JsonLine(StatsJson(stats)));
  return WriteStdout(StatsOrigin(stats) + "\n" + StatsTable(stats));
}

}  // namespace

Command AddStatsCommand(CLI::App* parent) {
  auto options = std::make_shared<StatsCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "stats",
      "Print a store's counters and tier gauges: live while a process owns it,\n"
      "else its last run's.\n"
      "  opt4store stats /data/cache --json");
  AddStoreArgument(app, &options->path);
  app->add_flag("--json", options->json, "Print one JSON object instead of a table");
  return Command{app, [options] { return RunStats(*options); }};
}

}  // namespace opt4store
