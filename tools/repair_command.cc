// opt4store repair: rebuilds a store's disk index from its segment files
// (Store::Repair), for a store whose open says its index is missing or
// damaged, or whose verify lists records lost at an open. Shows what the
// segments held and which ids are gone for good.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/sizes.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "store_admin.h"

namespace opt4store {

namespace {

// The report names this many lost ids.
constexpr size_t kIdsShown = 20;

struct RepairCommandOptions {
  std::string path;
  std::string dataset_size;  // for a new manifest, when the old one is gone
  std::string disk;
};

// What the repair did, as the report says; `done`: it wrote what it had to.
std::string ReportText(const std::string& path, const StoreRepairReport& report, bool done) {
  std::string out = "repaired " + path + ": " + Plural(report.records, "record") +
                    " indexed from " + Plural(report.segments, "segment file") + "\n";
  TextTable table({"", "value"});
  table.AddRow({"older versions skipped", std::to_string(report.older_versions)});
  table.AddRow({"damaged bytes skipped", FormatSize(report.damaged_bytes)});
  table.AddRow({"records lost for good", std::to_string(report.lost.size())});
  table.AddRow({"manifest", report.manifest_found ? "kept" : done ? "written anew" : "not written"});
  out += "\n" + table.Render();
  if (!report.lost.empty()) {
    std::string ids;
    for (size_t i = 0; i < report.lost.size() && i < kIdsShown; ++i) {
      ids += (i ? ", " : "") + std::to_string(report.lost[i]);
    }
    if (report.lost.size() > kIdsShown) ids += ", ...";
    out += "\nlost (no segment holds them; reads of them miss): " + ids + "\n";
  }
  if (!report.index_salvage.empty()) {
    out += "\nthe old index could not be salvaged: " + report.index_salvage + "\n";
  }
  return out;
}

Status RunRepair(const RepairCommandOptions& o) {
  StoreOptions options;
  options.info_log = LogStoreWarning;
  if (!o.dataset_size.empty()) {
    uint64_t n = 0;
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.dataset_size, &n).WithContext("--dataset-size"));
    options.dataset_size = n;
  }
  if (!o.disk.empty()) {
    uint64_t bytes = 0;
    OPT4STORE_RETURN_IF_ERROR(ParseSize(o.disk, &bytes).WithContext("--disk"));
    options.disk = bytes;
  }
  StoreRepairReport report;
  Status s = Store::Repair(options, o.path, &report);
  if (s.IsBusy()) {
    return ExplainBusy(o.path, s);
  }
  if (!report.index_rebuilt) return s;
  // The index was rebuilt whatever came after: its lost ids are known to
  // this run only, so they are shown even when the manifest step failed.
  std::string out = ReportText(o.path, report, s.ok());
  if (s.ok()) return WriteStdout(out);
  if (!report.manifest_found && s.IsInvalidArgument()) {
    s = s.WithContext("--dataset-size");
  } else if (report.manifest_found && s.IsInvalidArgument()) {
    s = Status::InvalidArgument(s.message() + " (a budget changes at an open: Store(disk=...))");
  } else if (s.IsCorruption() && !report.manifest_found &&
             (o.dataset_size.empty() || o.disk.empty())) {
    s = Status::Corruption(s.message() + "; run 'opt4store repair " + o.path +
                           " --dataset-size N --disk SIZE'");
  }
  OPT4STORE_RETURN_IF_ERROR(WriteStdout(out));
  return s;
}

}  // namespace

Command AddRepairCommand(CLI::App* parent) {
  auto options = std::make_shared<RepairCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "repair",
      "Rebuild a store's disk index from its segment files (after an open or verify said the "
      "index is damaged or records were lost).\n"
      "  opt4store repair /data/cache\n"
      "  opt4store repair /data/cache --dataset-size 50000 --disk 200GiB   # manifest lost too");
  AddStoreArgument(app, &options->path);
  app->add_option("--dataset-size", options->dataset_size,
                  "Only when the manifest was lost with the index: the store's dataset size")
      ->type_name("N")
      ->check(RejectEmpty);
  app->add_option("--disk", options->disk,
                  "Only when the manifest was lost with the index: the disk tier's budget")
      ->type_name("SIZE")
      ->check(RejectEmpty);
  return Command{app, [options] { return RunRepair(*options); }};
}

}  // namespace opt4store
