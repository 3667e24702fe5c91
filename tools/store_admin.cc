#include "store_admin.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_common.h"

namespace opt4store {

void AddStoreArgument(CLI::App* app, std::string* path) {
  app->add_option("STORE", *path, "The store's directory")->required()->type_name("");
}

void LogStoreWarning(const std::string& message) {
  std::fprintf(stderr, "opt4store: warning: %s\n", message.c_str());
}

Status OpenExistingStore(const std::string& path, std::unique_ptr<Store>* store, bool reset) {
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
  options.reset = reset;
  options.info_log = LogStoreWarning;
  Status s = Store::Open(options, path, store);
  if (s.IsNotFound()) return Status::NotFound("no store at " + path + " (" + s.message() + ")");
  if (s.IsBusy()) return ExplainBusy(path, s);
  if (!s.ok() && s.message().find(path) == std::string::npos) return s.WithContext(path);
  return s;
}

Status ExplainBusy(const std::string& path, const Status& busy) {
  // The store's message names the holder; say what to do about it.
  std::unique_ptr<LiveStore> live;
  if (LiveStore::Open(path, &live).ok()) {
    return Status::Busy(busy.message() + "; another process, pid " +
                        std::to_string(live->owner_pid()) +
                        ", has the store open (stop it first; 'opt4store stats " + path +
                        "' shows its live counters)");
  }
  return Status::Busy(busy.message() + "; the store is open in another process (stop it first)");
}

void FindLiveStore(const std::string& path, std::unique_ptr<LiveStore>* live) {
  live->reset();
  Status s = LiveStore::Open(path, live);
  if (!s.ok() && !s.IsNotFound()) LogStoreWarning(s.ToString());
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

// Both views are made from the one stats table (opt4store/store_stats.h), so
// the JSON keys and the table's rows are the fields' names.
nlohmann::ordered_json StatsJson(const StoreStats& s, std::initializer_list<std::string_view> groups) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  VisitStats(s, [&](const StatField& field, auto value) {
    if (groups.size() == 0 || std::find(groups.begin(), groups.end(), field.group) != groups.end()) {
      json[field.name] = value;
    }
  });
  return json;
}

namespace {

std::string FormatStat(StatKind kind, uint64_t v) {
  switch (kind) {
    case StatKind::kBytes: return FormatSize(v);
    case StatKind::kNanos: return FormatDuration(static_cast<double>(v) / 1e9);
    default: return std::to_string(v);
  }
}
std::string FormatStat(StatKind, double v) { return StringPrintf("%.3f", v); }
std::string FormatStat(StatKind, bool v) { return v ? "yes" : "no"; }

}  // namespace

std::string StatsOrigin(const StoreStats& s) {
  if (s.live) return "live: the store is open, owned by pid " + std::to_string(s.owner_pid) + "\n";
  if (s.last_run) return "last run: the store is closed; counters saved when it closed\n";
  return "last run: the store is closed; no run has saved counters\n";
}

std::string StatsTable(const StoreStats& s) {
  // One table, so that every value lines up; group rows carry no value.
  TextTable table({"field", "value"});
  std::string group;
  VisitStats(s, [&](const StatField& field, auto value) {
    if (group != field.group) {
      group = field.group;
      table.AddRow({group, ""});
    }
    table.AddRow({std::string("  ") + field.name, FormatStat(field.kind, value)});
  });
  return table.Render();
}

}  // namespace opt4store
