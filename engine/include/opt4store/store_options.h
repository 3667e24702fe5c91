// StoreOptions: how a store is opened; StoreSettings: what it keeps.
//
// OPT4STORE_STORE_SETTINGS(X) lists, once, the settings a store saves in its
// manifest and may change from run to run, one row each:
//   X(name, type, kind, default_text, help)
// Everything that names a setting is made from it: the optional fields of
// StoreOptions, StoreSettings (every field set: what an open store runs
// with), the manifest's "name=value" lines, `opt4store create`'s flags
// (--ram, --prefetch-depth: the name with '-' for '_'), `opt4store
// inspect`, the keyword arguments of Python's opt4store.Store (checked
// against _core.setting_fields() by tests/python/test_options.py), and the
// README's "Options" list (checked by the same test). A setting has one name
// everywhere: StoreOptions::ram, Store(ram="8GiB"), --ram 8GiB, "ram=" in
// the manifest. Adding a setting takes a row here, the code that uses it,
// and a test.
//
// kind: kCount a whole number, kBytes a size (ParseSize's grammar, sizes.h:
// "8GiB"), kName one of a few names.
//
// Thread safety: plain values and functions.
#ifndef OPT4STORE_STORE_OPTIONS_H_
#define OPT4STORE_STORE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/status.h"

namespace opt4store {

class Env;

// How the disk tier stores values: kAuto compresses with LZ4 where that
// saves at least 10% of the value's bytes. (The first enumerator of each
// setting's type is its default: StoreSettings value-initializes them.)
enum class Compression { kAuto, kNone };
// When disk-tier writes become durable (see disk_tier.h): at Flush and
// Close, never forced, or at every Put.
enum class SyncMode { kOnFlush, kNone, kEveryPut };

#define OPT4STORE_STORE_SETTINGS(X)                                                              \
  X(ram, uint64_t, kBytes, "1GiB",                                                               \
    "RAM tier capacity in bytes of item data (meta + payload, each item in whole units: 64 bytes " \
    "up to 256GiB)")                                                                             \
  X(ram_items, uint64_t, kCount, "unset",                                                        \
    "RAM tier capacity in items instead of bytes (exclusive with ram)")                          \
  X(disk, uint64_t, kBytes, "0",                                                                 \
    "disk tier budget; 0: no disk tier, nothing is written and nothing persists")                \
  X(policy, PolicyKind, kName, "opt",                                                            \
    "RAM tier eviction policy: opt, opt-size, lru, lfu, fifo, random, static, none")             \
  X(prefetch_depth, uint64_t, kCount, "512",                                                     \
    "positions the planner runs ahead of the readers' frontier")                                 \
  X(staging, uint64_t, kBytes, "ram/8",                                                          \
    "the part of ram for items the readers ahead of the frontier still need (prefetched, or "    \
    "kept for a lagging reader); the policy gets ram - staging. With ram_items: on top, "        \
    "default max(64MiB, ram/8)")                                                                 \
  X(compression, Compression, kName, "auto", "disk tier values: auto (LZ4 where it saves >= 10%) " \
    "or none")                                                                                   \
  X(sync, SyncMode, kName, "flush", "when disk writes are durable: none, flush or every (Put)")

enum class SettingKind { kCount, kBytes, kName };

// The smallest disk budget: eight of the disk tier's smallest segments
// (4 KiB), one of which is its compaction reserve.
constexpr uint64_t kMinDiskBytes = 32 * 1024;
// The smallest queue_bytes (StoreOptions): a value may take half of it.
constexpr uint64_t kMinQueueBytes = uint64_t{1} << 20;
// The longest fetch_timeout_ms, about 24.8 days: far beyond any fetch, and
// in nanoseconds it fits an int64_t.
constexpr int64_t kMaxFetchTimeoutMs = (int64_t{1} << 31) - 1;
// The longest shm_prefix: a shared-memory name, "/<shm_prefix>-queue.<pid>.<n>",
// stays within NAME_MAX (255).
constexpr size_t kMaxShmPrefixBytes = 200;

// One row of the table, for code that shows or reads every setting.
struct SettingField {
  const char* name;
  SettingKind kind;
  const char* default_text;  // the default, as the docs write it
  const char* help;
};

// The rows, in table order.
const std::vector<SettingField>& SettingFields();

// Options. A field left unset takes the value the store's manifest holds
// when the store exists, else the default written next to it. Values given
// for an existing store must agree with its manifest where the comment says
// "fixed at creation"; the settings (the table above) may change from run
// to run and are saved as the new values.
struct StoreOptions {
  using Compression = opt4store::Compression;
  using SyncMode = opt4store::SyncMode;

  // ---- Shape: fixed at creation.

  // N: ids are [0, N). Default: the plan's dataset size. Required when
  // creating a store without a plan.
  std::optional<uint64_t> dataset_size;
  // What the values were made by: any non-empty text the caller chooses
  // (the dataset's version, its transform's repr, a hash of both). Saved
  // at creation; an open that gives another fingerprint gets Stale
  // (naming both) unless `reset` is set, and is then saved as the new one.
  // Not given: the saved one stays (none for a store made without one). A
  // store without one, or one that holds no values, takes the one given.
  // Not a row of OPT4STORE_STORE_SETTINGS: those may change freely from
  // run to run; this one may not. Kept verbatim (any bytes).
  std::optional<std::string> fingerprint;

  // ---- Settings: one optional field per row of OPT4STORE_STORE_SETTINGS.
  // ram_items: the policy then counts items; the shared segment reserves
  // address space for ram_items times the largest item seen, not memory,
  // so /dev/shm must hold only what is really used.
#define OPT4STORE_DECLARE_OPTION(name, type, kind, default_text, help) std::optional<type> name;
  OPT4STORE_STORE_SETTINGS(OPT4STORE_DECLARE_OPTION)
#undef OPT4STORE_DECLARE_OPTION

  // ---- Plan.

  // The readers' order. Generated and file plans are saved in the manifest
  // and reused when a later open gives none; explicit plans are not saved.
  // Without any plan the RAM tier fills once and never evicts (static).
  // A plan's dataset size must equal the store's.
  std::optional<PlanSpec> plan;
  // Look-ahead of the plan for next uses (positions); 0: the whole plan up
  // to 8 Mi positions (see next_use.h).
  uint64_t plan_window = 0;

  // ---- This open only (not saved).

  bool direct_io = true;
  bool use_io_uring = true;
  // false: NotFound unless a store (a disk tier's files) exists at path;
  // a store without a disk tier keeps nothing there, so never exists.
  bool create_if_missing = true;
  // InvalidArgument if a store exists at path.
  bool error_if_exists = false;
  // Empties the store's values (the disk tier's records, segment files and
  // index entries) as it opens, before anything reads them; its settings,
  // plan and cursor stay, and a fingerprint given is saved. What a changed
  // fingerprint needs, and what `opt4store clear` does.
  bool reset = false;
  // Admin mode: the disk tier and the manifest only; no shared memory, no
  // planner. Get reads the disk tier, Put writes it. For the CLI.
  bool disk_only = false;
  // How long a worker waits for the owner to fetch a disk item before it
  // gives up and loads from the source. Default: 10 s.
  int64_t fetch_timeout_ms = 10000;

  // Shared-memory names: "/<shm_prefix>-{ram,queue,ctl}.<pid>.<n>".
  std::string shm_prefix = "opt4store";
  // Bytes of the queue that carries workers' Puts and fetch requests to the
  // owner. Default: 64 MiB (a value may use up to half of it). /dev/shm
  // gives it 4 MiB at the open and more as Puts first need it.
  uint64_t queue_bytes = uint64_t{64} << 20;

  // Warnings (full disk, drift, fallbacks), each kind once. Default: stderr.
  std::function<void(const std::string&)> info_log;
  // Tests: the file layer of the disk tier's segments; nullptr: the OS.
  Env* env = nullptr;
  // Tests: a fake /dev/shm free-space probe.
  std::function<Status(const std::string& dir, uint64_t* free_bytes)> shm_free_space_for_testing;
  // Tests: called by the owner's planner thread at the start of each turn
  // (a test holds it there to make the planner lag).
  std::function<void()> planner_turn_for_testing;
};

// What an open store runs with: its dataset size, its fingerprint and
// every setting, each set (ram is 0 when the capacity is in items,
// ram_items 0 otherwise; a count or size is 0 until the open fills in its
// default). The manifest saves it; Store::Inspect reports it.
struct StoreSettings {
  uint64_t dataset_size = 0;
  std::string fingerprint;  // "" for none
#define OPT4STORE_DECLARE_SETTING(name, type, kind, default_text, help) type name{};
  OPT4STORE_STORE_SETTINGS(OPT4STORE_DECLARE_SETTING)
#undef OPT4STORE_DECLARE_SETTING
};

// Sets the option `name` (a row of the table) from text: a size for kBytes,
// a decimal number for kCount, a name for kName. Returns InvalidArgument
// naming the setting for an unknown name or a bad value; *options is then
// unchanged.
Status SetOption(std::string_view name, std::string_view text, StoreOptions* options);

// InvalidArgument for settings an open is given that no store runs with
// (the manifest's values are not checked here: it writes 0 for the one of
// ram and ram_items not in use): ram=0, ram_items=0, a disk budget below
// kMinDiskBytes but 0, ram and ram_items together, queue_bytes below
// kMinQueueBytes or above 2^56 (the largest shared segment), fetch_timeout_ms
// outside 0 to kMaxFetchTimeoutMs, an shm_prefix that is empty, holds a '/'
// or is longer than kMaxShmPrefixBytes. Store::Open checks its
// options with it; bindings call it to refuse them before any open.
Status CheckGivenOptions(const StoreOptions& options);

// Calls visit(const SettingField&, std::string text) for every setting of
// `settings`, in table order, with its value as SetOption reads it back
// (sizes as plain byte counts).
void VisitSettings(const StoreSettings& settings,
                   const std::function<void(const SettingField&, const std::string&)>& visit);

// The options given in `options` override `settings`; ram and ram_items
// exclude each other, so giving one of them alone clears the other.
void ApplyOptions(const StoreOptions& options, StoreSettings* settings);

const char* CompressionName(Compression compression);
Status ParseCompression(std::string_view name, Compression* compression);
const char* SyncModeName(SyncMode sync);
Status ParseSyncMode(std::string_view name, SyncMode* sync);

}  // namespace opt4store

#endif  // OPT4STORE_STORE_OPTIONS_H_
