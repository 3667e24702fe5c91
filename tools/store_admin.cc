#include "store_admin.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "json_writer.h"

namespace opt4store {

void AddStoreArgument(CLI::App* app, std::string* path) {
  app->add_option("STORE", *path, "The store's directory")->required()->type_name("");
}

void LogStoreWarning(const std::string& message) {
  std::fprintf(stderr, "opt4store: warning: %s\n", message.c_str());
}

Status OpenExistingStore(const std::string& path, std::unique_ptr<Store>* store) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return Status::NotFound("no store at " + path + " (create one with 'opt4store create')");
    }
    return Status::FromErrno(path, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::NotFound("no store at " + path + ": it is not a directory");
  }
  StoreOptions options;
  options.create_if_missing = false;
  options.disk_only = true;
  options.info_log = LogStoreWarning;
  Status s = Store::Open(options, path, store);
  if (s.IsNotFound()) return Status::NotFound("no store at " + path + " (" + s.message() + ")");
  if (s.IsBusy()) {
    // The store's message names the holder; say what to do about it.
    return Status::Busy(s.message() + "; the store is open in another process (stop it first)");
  }
  if (!s.ok() && s.message().find(path) == std::string::npos) return s.WithContext(path);
  return s;
}

Status CloseStore(const std::string& path, std::unique_ptr<Store>* store) {
  if (*store == nullptr) return Status::OK();
  Status s = (*store)->Close();
  store->reset();
  if (!s.ok()) return s.WithContext("closing " + path);
  return Status::OK();
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  if (seconds < 60) return StringPrintf("%.1f s", seconds);
  const uint64_t s = static_cast<uint64_t>(std::llround(seconds));
  if (s < 3600)
    return StringPrintf("%llu:%02llu", static_cast<unsigned long long>(s / 60),
                        static_cast<unsigned long long>(s % 60));
  return StringPrintf("%llu:%02llu:%02llu", static_cast<unsigned long long>(s / 3600),
                      static_cast<unsigned long long>(s / 60 % 60),
                      static_cast<unsigned long long>(s % 60));
}

void WriteStatsJson(const StoreStats& s, JsonWriter* json) {
  json->BeginObject();
  json->Field("accesses", s.accesses);
  json->Field("hits_ram", s.hits_ram);
  json->Field("hits_disk", s.hits_disk);
  json->Field("misses", s.misses);
  json->Field("puts", s.puts);
  json->Field("puts_dropped", s.puts_dropped);
  json->Field("drift", s.drift);
  json->Field("waits", s.waits);
  json->Field("wait_ns", s.wait_ns);
  json->Field("fetch_requests", s.fetch_requests);
  json->Field("fetch_timeouts", s.fetch_timeouts);
  json->Field("prefetched", s.prefetched);
  json->Field("prefetch_bytes", s.prefetch_bytes);
  json->Field("planned_positions", s.planned_positions);
  json->Field("policy_hits", s.policy_hits);
  json->Field("ram_insert_failures", s.ram_insert_failures);
  json->Field("disk_put_errors", s.disk_put_errors);
  json->Field("abandoned_positions", s.abandoned_positions);
  json->Field("position", s.position);
  json->Field("epoch", s.epoch);
  json->Field("total_positions", s.total_positions);
  json->Field("ram_items", s.ram_items);
  json->Field("ram_bytes_used", s.ram_bytes_used);
  json->Field("ram_capacity", s.ram_capacity);
  json->Field("ram_capacity_in_items", s.ram_capacity_in_items);
  json->Field("ram_arena_bytes", s.ram_arena_bytes);
  json->Field("ram_bytes_per_item", s.ram_bytes_per_item);
  json->Field("disk_items", s.disk_items);
  json->Field("disk_live_bytes", s.disk_live_bytes);
  json->Field("disk_file_bytes", s.disk_file_bytes);
  json->Field("disk_budget", s.disk_budget);
  json->Field("disk_segments", s.disk_segments);
  json->Field("disk_write_amplification", s.disk_write_amplification);
  json->Field("disk_space_amplification", s.disk_space_amplification);
  json->Field("disk_corrupt_records", s.disk_corrupt_records);
  json->Field("disk_evictions", s.disk_evictions);
  json->Field("disk_compactions", s.disk_compactions);
  json->Field("disk_index_bytes_per_item", s.disk_index_bytes_per_item);
  json->Field("io_uring", s.io_uring);
  json->Field("direct_io", s.direct_io);
  json->EndObject();
}

std::string StatsTable(const StoreStats& s) {
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto size = [](uint64_t v) { return FormatSize(v); };
  auto ratio = [](double v) { return StringPrintf("%.3f", v); };
  auto yes = [](bool v) { return std::string(v ? "yes" : "no"); };
  // One table, so that every value lines up; group rows carry no value.
  TextTable table({"counter", "value"});
  auto group = [&](const char* name) { table.AddRow({name, ""}); };
  auto row = [&](const char* name, std::string value) {
    table.AddRow({std::string("  ") + name, std::move(value)});
  };
  group("reads");
  row("accesses", u(s.accesses));
  row("hits (RAM)", u(s.hits_ram));
  row("hits (disk)", u(s.hits_disk));
  row("misses", u(s.misses));
  row("hit rate", s.accesses ? FormatPercent(static_cast<double>(s.hits_ram + s.hits_disk) /
                                             static_cast<double>(s.accesses))
                             : "-");
  row("puts", u(s.puts));
  row("puts dropped", u(s.puts_dropped));
  row("drift", u(s.drift));
  row("waits", u(s.waits));
  row("wait time", FormatDuration(static_cast<double>(s.wait_ns) / 1e9));
  row("fetch requests", u(s.fetch_requests));
  row("fetch timeouts", u(s.fetch_timeouts));
  group("planner");
  row("prefetched", u(s.prefetched));
  row("prefetch bytes", size(s.prefetch_bytes));
  row("planned positions", u(s.planned_positions));
  row("policy hits", u(s.policy_hits));
  row("RAM insert failures", u(s.ram_insert_failures));
  row("disk put errors", u(s.disk_put_errors));
  row("abandoned positions", u(s.abandoned_positions));
  group("cursor");
  row("epoch", u(s.epoch));
  row("position", u(s.position));
  row("plan positions", u(s.total_positions));
  group("RAM tier");
  row("items", u(s.ram_items));
  row("bytes used", size(s.ram_bytes_used));
  row("capacity", s.ram_capacity_in_items ? u(s.ram_capacity) + " items" : size(s.ram_capacity));
  row("arena", size(s.ram_arena_bytes));
  row("bytes per dataset id", u(s.ram_bytes_per_item));
  group("disk tier");
  row("items", u(s.disk_items));
  row("live bytes", size(s.disk_live_bytes));
  row("file bytes", size(s.disk_file_bytes));
  row("budget", size(s.disk_budget));
  row("segments", u(s.disk_segments));
  row("write amplification", ratio(s.disk_write_amplification));
  row("space amplification", ratio(s.disk_space_amplification));
  row("corrupt records", u(s.disk_corrupt_records));
  row("evictions", u(s.disk_evictions));
  row("compactions", u(s.disk_compactions));
  row("index bytes per item", StringPrintf("%.1f", s.disk_index_bytes_per_item));
  row("io_uring", yes(s.io_uring));
  row("O_DIRECT", yes(s.direct_io));
  return table.Render();
}

}  // namespace opt4store
