// Helpers shared by the store's admin subcommands (create, import, get,
// inspect, verify, compact, clear, stats): the STORE argument, opening an existing
// store in admin mode, and the stats printers that inspect and stats share.
//
// Admin mode is StoreOptions::disk_only: the disk tier and the manifest
// only, no shared memory and no planner. It still takes dir/LOCK, so an
// admin command on a store that a training job holds fails with Busy (the
// message names the holder) instead of racing it. Only `stats` and
// `inspect` look at such a store, read-only, through LiveStore.
#ifndef OPT4STORE_TOOLS_STORE_ADMIN_H_
#define OPT4STORE_TOOLS_STORE_ADMIN_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "opt4store/live_store.h"
#include "opt4store/status.h"
#include "opt4store/store.h"

namespace CLI {
class App;
}  // namespace CLI

namespace opt4store {

// Registers the required positional STORE (the store's directory).
void AddStoreArgument(CLI::App* app, std::string* path);

// Warnings from the store (fallbacks, full disk), one line each on stderr
// with the CLI's prefix.
void LogStoreWarning(const std::string& message);

// Opens the store at path, which must exist, in admin mode; with reset, its
// values are emptied as it opens (StoreOptions::reset: `clear`).
// Returns: OK; NotFound "no store at PATH" when there is none; Busy when
// another process has it open (the store's message, naming the holder);
// what Store::Open returns otherwise.
Status OpenExistingStore(const std::string& path, std::unique_ptr<Store>* store,
                         bool reset = false);

// A Busy from opening the store at path, with what to do about it: the
// live owner's pid when a process owns it (live_store.h).
Status ExplainBusy(const std::string& path, const Status& busy);

// The store at path as its live owner shows it (live_store.h), for `stats`
// and `inspect`; *live stays null when no live process owns it (then open
// it with OpenExistingStore). An owner whose shared memory cannot be read
// (another version) is warned about and left to OpenExistingStore's Busy.
void FindLiveStore(const std::string& path, std::unique_ptr<LiveStore>* live);

// Closes *store (the manifest and cursor are saved here) and reports how
// that went, naming the path.
Status CloseStore(const std::string& path, std::unique_ptr<Store>* store);

// "3.2 s", "1:05", "2:03:10": a duration for people.
std::string FormatDuration(double seconds);

// Every StoreStats field (or those of the given groups: "ram", "disk", ...)
// as one JSON object, keys as the field names.
nlohmann::ordered_json StatsJson(const StoreStats& stats,
                                 std::initializer_list<std::string_view> groups = {});
// The same as two-column text ("counter", "value") grouped by tier.
std::string StatsTable(const StoreStats& stats);
// One line on whose counters these are: "live: owned by pid N", or the
// closed store's last run (or none saved).
std::string StatsOrigin(const StoreStats& stats);

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_STORE_ADMIN_H_
