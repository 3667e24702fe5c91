// opt4store verify: re-reads every record of the disk tier and checks it
// (CRC32C, header, id), then lists each one that fails, and each record an
// open had to drop (its segment file deleted or cut short). Nothing it
// finds is changed: a corrupt record stays until a read meets it (and drops
// it) or compaction; a lost one is listed until a Put stores it again or
// repair. (Its admin open recovers as any open does: a torn tail is cut.)
#include <memory>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "store_admin.h"

namespace opt4store {

namespace {

// The error message names this many bad ids; the table lists them all.
constexpr size_t kIdsInMessage = 10;

struct VerifyCommandOptions {
  std::string path;
  bool json = false;
};

std::string ReportJson(const StoreVerifyReport& report) {
  nlohmann::ordered_json json;
  json["records_checked"] = report.records_checked;
  json["bytes_checked"] = report.bytes_checked;
  json["corrupt"] = report.bad.size() - report.lost - report.orphaned;
  json["lost"] = report.lost;
  json["orphaned"] = report.orphaned;
  json["bad"] = nlohmann::ordered_json::array();
  for (const StoreVerifyReport::Bad& bad : report.bad) {
    json["bad"].push_back(
        {{"id", bad.id}, {"where", bad.where}, {"reason", bad.status.ToString()}});
  }
  return JsonLine(std::move(json));
}

std::string ReportText(const std::string& path, const StoreVerifyReport& report) {
  std::string out = "verified " + path + ": " + Plural(report.records_checked, "record") + ", " +
                    FormatSize(report.bytes_checked) + ", " +
                    std::to_string(report.bad.size() - report.lost - report.orphaned) +
                    " corrupt, " + std::to_string(report.lost) + " lost, " +
                    std::to_string(report.orphaned) + " orphaned\n";
  if (report.bad.empty()) return out;
  TextTable table({"id", "where", "reason"});
  for (const StoreVerifyReport::Bad& bad : report.bad) {
    table.AddRow({std::to_string(bad.id), bad.where, bad.status.ToString()});
  }
  return out + "\n" + table.Render();
}

Status RunVerify(const VerifyCommandOptions& o) {
  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
  StoreVerifyReport report;
  Status verified = store->Verify(&report);
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));
  // Corruption with a report is the answer, not a failure to verify.
  if (!verified.ok() && !(verified.IsCorruption() && !report.bad.empty())) {
    return verified.WithContext("verify " + o.path);
  }
  OPT4STORE_RETURN_IF_ERROR(WriteStdout(o.json ? ReportJson(report) : ReportText(o.path, report)));
  if (report.bad.empty()) return Status::OK();

  std::string ids;
  for (size_t i = 0; i < report.bad.size() && i < kIdsInMessage; ++i) {
    ids += (i ? ", " : "") + std::to_string(report.bad[i].id);
  }
  if (report.bad.size() > kIdsInMessage) ids += ", ...";
  const uint64_t corrupt = report.bad.size() - report.lost - report.orphaned;
  std::string what = std::to_string(corrupt) + " of " + Plural(report.records_checked, "record") +
                     " in " + o.path + " are corrupt";
  if (report.lost > 0) {
    what += ", " + Plural(report.lost, "record") + " lost at an open (a segment file " +
            "deleted or cut short)";
  }
  if (report.orphaned > 0) {
    what += ", " + Plural(report.orphaned, "record") + " newer than the indexed version and " +
            "not indexed (orphaned)";
  }
  return Status::Corruption(what + " (ids " + ids + "); reads of them miss; 'opt4store repair " +
                            o.path + "' rebuilds the index from what the segments hold");
}

}  // namespace

Command AddVerifyCommand(CLI::App* parent) {
  auto options = std::make_shared<VerifyCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "verify",
      "Re-read and check every record of a store; list the corrupt ones and exit non-zero if "
      "there are any.\n"
      "  opt4store verify /data/cache");
  AddStoreArgument(app, &options->path);
  app->add_flag("--json", options->json, "Print one JSON object instead of text");
  return Command{app, [options] { return RunVerify(*options); }};
}

}  // namespace opt4store
