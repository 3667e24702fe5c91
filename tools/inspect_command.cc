// opt4store inspect: what a store holds and how it is set up: its manifest
// (options, fingerprint, plan), where a restart resumes (cursor), each tier's count and
// bytes, and the disk tier's segment files. A store a process owns now is
// read live and read-only (LiveStore): the cursor is then the readers'
// frontier, and the tiers are as the owner last published them.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

struct InspectCommandOptions {
  std::string path;
  bool json = false;
};

std::string RamCapacityText(const StoreSettings& settings) {
  return settings.ram ? FormatSize(settings.ram) : Plural(settings.ram_items, "item");
}

// The store's settings by their names (store_options.h): sizes and counts
// as numbers, names as strings. Then the tiers' figures by their stats
// names (store_stats.h), so that each fact has one name in every view.
std::string InspectJson(const StoreInfo& info, const StoreStats& stats) {
  nlohmann::ordered_json json;
  json["path"] = info.path;
  json["live"] = stats.live;
  json["owner_pid"] = stats.owner_pid;
  json["dataset_size"] = info.settings.dataset_size;
  if (info.settings.fingerprint.empty()) {
    json["fingerprint"] = nullptr;
  } else {
    json["fingerprint"] = info.settings.fingerprint;
  }
  json["plan"] = info.plan;
  VisitSettings(info.settings, [&json](const SettingField& field, const std::string& text) {
    if (field.kind == SettingKind::kName) {
      json[field.name] = text;
    } else {
      json[field.name] = std::stoull(text);
    }
  });
  json["cursor"] = {{"epoch", info.cursor_epoch},
                    {"position", info.cursor_position},
                    {"plan", info.cursor_plan}};
  json["tiers"] = StatsJson(stats, {"ram", "disk"});
  json["segments"] = nlohmann::ordered_json::array();
  for (const StoreInfo::Segment& seg : info.segments) {
    json["segments"].push_back(
        {{"name", seg.name}, {"file_bytes", seg.file_bytes}, {"live_bytes", seg.live_bytes}});
  }
  return JsonLine(std::move(json));
}

std::string InspectText(const StoreInfo& info, const StoreStats& stats) {
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto line = [](std::string name, const std::string& value) {
    name += ':';
    name.resize(std::max<size_t>(name.size() + 1, 16), ' ');
    return name + value + "\n";
  };
  std::string out;
  out += line("store", info.path);
  out += line("owner", stats.live ? "pid " + u(stats.owner_pid) + " (live: the store is open)"
                                  : std::string("none (the store is closed)"));
  out += line("dataset size", Plural(info.settings.dataset_size, "item"));
  out += line("fingerprint", info.settings.fingerprint.empty()
                                 ? std::string("none")
                                 : "'" + info.settings.fingerprint + "'");
  // A plan set by a run (Python's PlannedSampler sets one at every bind) is
  // not the store's own; the cursor names it.
  out += line("plan", !info.plan.empty()          ? info.plan
                      : info.cursor_plan.empty() ? std::string("none")
                                                 : "set by the last run: " + info.cursor_plan);
  VisitSettings(info.settings, [&](const SettingField& field, const std::string& text) {
    // ram and ram_items exclude each other: show the one in use.
    const std::string_view name = field.name;
    const bool in_items = info.settings.ram_items != 0;
    if ((name == "ram" && in_items) || (name == "ram_items" && !in_items)) return;
    out += line(field.name, field.kind == SettingKind::kBytes ? FormatSize(std::stoull(text)) : text);
  });
  out += "cursor:         epoch " + u(info.cursor_epoch) + ", position " + u(info.cursor_position);
  if (!info.cursor_plan.empty() && !info.plan.empty() && info.cursor_plan != info.plan) {
    out += " (of plan " + info.cursor_plan + ")";
  }
  out += "\n\n";

  TextTable tiers({"tier", "items", "bytes", "file bytes", "budget"});
  tiers.AddRow(
      {"RAM", u(stats.ram_items), FormatSize(stats.ram_bytes_used), "-",
       RamCapacityText(info.settings)});
  tiers.AddRow({"disk", u(stats.disk_items), FormatSize(stats.disk_live_bytes),
                FormatSize(stats.disk_file_bytes), FormatSize(stats.disk_budget)});
  out += tiers.Render();
  out += "\nspace amplification: " + StringPrintf("%.3f", stats.disk_space_amplification) +
         " (segment file bytes / live bytes)\n\n";

  if (info.segments.empty()) {
    out += "segments: none\n";
    return out;
  }
  out += "segments:\n";
  TextTable segments({"name", "file bytes", "live bytes", "live"});
  for (const StoreInfo::Segment& seg : info.segments) {
    segments.AddRow({seg.name, u(seg.file_bytes), u(seg.live_bytes),
                     seg.file_bytes ? FormatPercent(static_cast<double>(seg.live_bytes) /
                                                    static_cast<double>(seg.file_bytes))
                                    : "-"});
  }
  out += segments.Render();
  return out;
}

Status RunInspect(const InspectCommandOptions& o) {
  std::unique_ptr<LiveStore> live;
  FindLiveStore(o.path, &live);
  if (live) {
    StoreInfo info;
    OPT4STORE_RETURN_IF_ERROR(live->Inspect(&info));
    const StoreStats stats = live->Stats();
    return WriteStdout(o.json ? InspectJson(info, stats) : InspectText(info, stats));
  }
  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
  StoreInfo info;
  Status inspected = store->Inspect(&info);
  const StoreStats stats = store->Stats();
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));
  OPT4STORE_RETURN_IF_ERROR(inspected);
  return WriteStdout(o.json ? InspectJson(info, stats) : InspectText(info, stats));
}

}  // namespace

Command AddInspectCommand(CLI::App* parent) {
  auto options = std::make_shared<InspectCommandOptions>();
  CLI::App* app =
      parent->add_subcommand("inspect",
                             "Show a store's options, plan, cursor, tiers and segment files.\n"
                             "  opt4store inspect /data/cache\n"
                             "  opt4store inspect /data/cache --json");
  AddStoreArgument(app, &options->path);
  app->add_flag("--json", options->json, "Print one JSON object instead of text");
  return Command{app, [options] { return RunInspect(*options); }};
}

}  // namespace opt4store
