// The opt4store subcommands. Each lives in its own <name>_command.cc and
// exposes one Add<Name>Command() that registers its options on the parent
// App and returns the Command that main() runs when it was chosen. A new
// subcommand is a new file, one declaration here and one line in main().
#ifndef OPT4STORE_TOOLS_COMMANDS_H_
#define OPT4STORE_TOOLS_COMMANDS_H_

#include "cli_common.h"

namespace opt4store {

// plan: writes a generated plan to a file, or summarises one (--info).
Command AddPlanCommand(CLI::App* parent);
// simulate: replays a plan through cache policies and reports hit rates.
Command AddSimulateCommand(CLI::App* parent);
// demo: the hit-rate curve of the reference setup (until the store exists).
Command AddDemoCommand(CLI::App* parent);

// The store's admin commands (store_admin.h): they open the store in admin
// mode (disk tier and manifest only), so they fail with Busy while a
// training job holds it.
// create: a new store directory and its manifest.
Command AddCreateCommand(CLI::App* parent);
// import: samples from a directory (one per file) or an .npy (one per row).
Command AddImportCommand(CLI::App* parent);
// get: one sample's payload to a file, or its value header.
Command AddGetCommand(CLI::App* parent);
// inspect: options, plan, cursor, tiers and segments.
Command AddInspectCommand(CLI::App* parent);
// verify: checks every record; non-zero exit if any is corrupt.
Command AddVerifyCommand(CLI::App* parent);
// repair: rebuilds the disk index from the segment files.
Command AddRepairCommand(CLI::App* parent);
// compact: rewrites sparse segments.
Command AddCompactCommand(CLI::App* parent);
// clear: empties the store's values, keeping its settings and fingerprint.
Command AddClearCommand(CLI::App* parent);
// stats: Store::Stats() as a table or JSON.
Command AddStatsCommand(CLI::App* parent);

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_COMMANDS_H_
