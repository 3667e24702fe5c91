// opt4store inspect: what a store holds and how it is set up: its manifest
// (options, plan), where a restart resumes (cursor), each tier's count and
// bytes, and the disk tier's segment files.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "store_admin.h"

namespace opt4store {

namespace {

struct InspectCommandOptions {
  std::string path;
  bool json = false;
};

std::string RamCapacityText(const StoreInfo& info) {
  return info.ram_bytes ? FormatSize(info.ram_bytes) : Plural(info.ram_items, "item");
}

std::string InspectJson(const StoreInfo& info, const StoreStats& stats) {
  nlohmann::ordered_json json;
  json["path"] = info.path;
  json["dataset_size"] = info.dataset_size;
  json["policy"] = info.policy;
  json["plan"] = info.plan;
  json["ram_bytes"] = info.ram_bytes;
  json["ram_items"] = info.ram_items;
  json["disk_bytes"] = info.disk_bytes;
  json["prefetch_depth"] = info.prefetch_depth;
  json["staging_bytes"] = info.staging_bytes;
  json["compression"] = info.compression;
  json["sync"] = info.sync;
  json["cursor"] = {{"epoch", info.cursor_epoch},
                    {"position", info.cursor_position},
                    {"plan", info.cursor_plan}};
  json["tiers"]["ram"] = {{"items", stats.ram_items}, {"bytes", stats.ram_bytes_used}};
  json["tiers"]["disk"] = {{"items", stats.disk_items},
                           {"live_bytes", stats.disk_live_bytes},
                           {"file_bytes", stats.disk_file_bytes},
                           {"budget", stats.disk_budget},
                           {"space_amplification", stats.disk_space_amplification}};
  json["segments"] = nlohmann::ordered_json::array();
  for (const StoreInfo::Segment& seg : info.segments) {
    json["segments"].push_back(
        {{"name", seg.name}, {"file_bytes", seg.file_bytes}, {"live_bytes", seg.live_bytes}});
  }
  return JsonLine(std::move(json));
}

std::string InspectText(const StoreInfo& info, const StoreStats& stats) {
  auto u = [](uint64_t v) { return std::to_string(v); };
  std::string out;
  out += "store:          " + info.path + "\n";
  out += "dataset size:   " + Plural(info.dataset_size, "item") + "\n";
  out += "policy:         " + info.policy + "\n";
  out += "plan:           " + (info.plan.empty() ? std::string("none") : info.plan) + "\n";
  out += "RAM capacity:   " + RamCapacityText(info) + "\n";
  out += "disk budget:    " + FormatSize(info.disk_bytes) + "\n";
  out += "prefetch depth: " + u(info.prefetch_depth) + " positions, staging " +
         FormatSize(info.staging_bytes) + "\n";
  out += "compression:    " + info.compression + "\n";
  out += "sync:           " + info.sync + "\n";
  out += "cursor:         epoch " + u(info.cursor_epoch) + ", position " + u(info.cursor_position);
  if (!info.cursor_plan.empty() && info.cursor_plan != info.plan) {
    out += " (of plan " + info.cursor_plan + ")";
  }
  out += "\n\n";

  TextTable tiers({"tier", "items", "bytes", "file bytes", "budget"});
  tiers.AddRow(
      {"RAM", u(stats.ram_items), FormatSize(stats.ram_bytes_used), "-", RamCapacityText(info)});
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
