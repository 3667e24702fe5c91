// opt4store compact: rewrites the disk tier's sparse segments (those whose
// live bytes fell below half of the file) and deletes the old files, then
// shows what that reclaimed.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "store_admin.h"

namespace opt4store {

namespace {

struct CompactCommandOptions {
  std::string path;
};

Status RunCompact(const CompactCommandOptions& o) {
  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
  const StoreStats before = store->Stats();
  Status compacted = store->Compact();
  // Stats after a failed Compact still say where it stopped.
  const StoreStats after = store->Stats();
  Status flushed = compacted.ok() ? store->Flush() : Status::OK();
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));
  OPT4STORE_RETURN_IF_ERROR(compacted.WithContext("compact " + o.path));
  OPT4STORE_RETURN_IF_ERROR(flushed.WithContext("compact " + o.path));

  auto u = [](uint64_t v) { return std::to_string(v); };
  TextTable table({"", "before", "after"});
  table.AddRow(
      {"file bytes", FormatSize(before.disk_file_bytes), FormatSize(after.disk_file_bytes)});
  table.AddRow(
      {"live bytes", FormatSize(before.disk_live_bytes), FormatSize(after.disk_live_bytes)});
  table.AddRow({"segments", u(before.disk_segments), u(after.disk_segments)});
  table.AddRow({"items", u(before.disk_items), u(after.disk_items)});
  table.AddRow({"space amplification", StringPrintf("%.3f", before.disk_space_amplification),
                StringPrintf("%.3f", after.disk_space_amplification)});
  const uint64_t freed = before.disk_file_bytes > after.disk_file_bytes
                             ? before.disk_file_bytes - after.disk_file_bytes
                             : 0;
  return WriteStdout("compacted " + o.path + ": " + FormatSize(freed) + " freed, " +
                     Plural(after.disk_compactions - before.disk_compactions, "segment") +
                     " rewritten\n\n" + table.Render());
}

}  // namespace

Command AddCompactCommand(CLI::App* parent) {
  auto options = std::make_shared<CompactCommandOptions>();
  CLI::App* app =
      parent->add_subcommand("compact",
                             "Rewrite a store's sparse disk segments and delete the old files.\n"
                             "  opt4store compact /data/cache");
  AddStoreArgument(app, &options->path);
  return Command{app, [options] { return RunCompact(*options); }};
}

}  // namespace opt4store
