// opt4store clear: empties a store's values (the disk tier's records, segment
// files and index entries) and keeps its settings, fingerprint, plan and
// cursor: what a store filled by another version of the data needs (see
// StoreOptions::fingerprint). The RAM tier lives only while a process has
// the store open, and an open store cannot be cleared: like every admin
// command, clear fails with Busy while another process owns the store.
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

struct ClearCommandOptions {
  std::string path;
};

Status RunClear(const ClearCommandOptions& o) {
  // What it held, for the report: an admin open first, then the one that
  // clears. Another process that opens the store in between makes the
  // second open fail with Busy, and nothing is cleared.
  std::unique_ptr<Store> store;
  OPT4STORE_RETURN_IF_ERROR(OpenExistingStore(o.path, &store));
  const StoreStats before = store->Stats();
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));

  Status opened = OpenExistingStore(o.path, &store, /*reset=*/true);
  OPT4STORE_RETURN_IF_ERROR(opened.WithContext("clear " + o.path));
  StoreInfo info;
  Status inspected = store->Inspect(&info);
  const StoreStats after = store->Stats();
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));
  OPT4STORE_RETURN_IF_ERROR(inspected);
  if (after.disk_items != 0 || after.disk_file_bytes != 0) {
    return Status::IOError("clear " + o.path + ": " + Plural(after.disk_items, "item") +
                           " and " + FormatSize(after.disk_file_bytes) + " of segments remain");
  }
  return WriteStdout("cleared " + o.path + ": " + Plural(before.disk_items, "item") + " and " +
                     Plural(before.disk_segments, "segment file") + " (" +
                     FormatSize(before.disk_file_bytes) + ") removed; settings kept, fingerprint " +
                     (info.settings.fingerprint.empty() ? std::string("none")
                                                        : "'" + info.settings.fingerprint + "'") +
                     "\n");
}

}  // namespace

Command AddClearCommand(CLI::App* parent) {
  auto options = std::make_shared<ClearCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "clear",
      "Empty a store's values (disk records, segment files, index); keep its settings.\n"
      "  opt4store clear /data/cache");
  AddStoreArgument(app, &options->path);
  return Command{app, [options] { return RunClear(*options); }};
}

}  // namespace opt4store
