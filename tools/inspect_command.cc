// opt4store inspect: what a store holds and how it is set up: its manifest
// (options, plan), where a restart resumes (cursor), each tier's count and
// bytes, and the disk tier's segment files.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "json_writer.h"
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
  JsonWriter json;
  json.BeginObject();
  json.Field("path", info.path);
  json.Field("dataset_size", info.dataset_size);
  json.Field("policy", info.policy);
  json.Field("plan", info.plan);
  json.Field("ram_bytes", info.ram_bytes);
  json.Field("ram_items", info.ram_items);
  json.Field("disk_bytes", info.disk_bytes);
  json.Field("prefetch_depth", info.prefetch_depth);
  json.Field("staging_bytes", info.staging_bytes);
  json.Field("compression", info.compression);
  json.Field("sync", info.sync);
  json.Key("cursor");
  json.BeginObject();
  json.Field("epoch", info.cursor_epoch);
  json.Field("position", info.cursor_position);
  json.Field("plan", info.cursor_plan);
  json.EndObject();
  json.Key("tiers");
  json.BeginObject();
  json.Key("ram");
  json.BeginObject();
  json.Field("items", stats.ram_items);
  json.Field("bytes", stats.ram_bytes_used);
  json.EndObject();
  json.Key("disk");
  json.BeginObject();
  json.Field("items", stats.disk_items);
  json.Field("live_bytes", stats.disk_live_bytes);
  json.Field("file_bytes", stats.disk_file_bytes);
  json.Field("budget", stats.disk_budget);
  json.Field("space_amplification", stats.disk_space_amplification);
  json.EndObject();
  json.EndObject();
  json.Key("segments");
  json.BeginArray();
  for (const StoreInfo::Segment& seg : info.segments) {
    json.BeginObject();
    json.Field("name", seg.name);
    json.Field("file_bytes", seg.file_bytes);
    json.Field("live_bytes", seg.live_bytes);
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  return json.str() + "\n";
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
