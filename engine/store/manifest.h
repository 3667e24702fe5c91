// The store's manifest: what a store remembers about itself between runs,
// kept as small text values in the disk tier's metadata (DiskTier::PutMeta),
// which lives in the same RocksDB as the index and is synced with it.
//
//   "store/format"   "opt4store-store 1"
//   "store/options"  key=value lines: dataset_size, then every setting of
//                    OPT4STORE_STORE_SETTINGS (store_options.h) by its name;
//                    stores written before the table say ram_bytes,
//                    disk_bytes and staging_bytes, which are still read
//   "store/fingerprint"  StoreOptions::fingerprint, verbatim; absent for a
//                    store made without one (or before fingerprints)
//   "store/plan"     key=value lines of a generated or file PlanSpec
//   "store/cursor"   "plan=<PlanSpec::Describe()>", "position=<n>" and
//                    "epoch_length=<n>"
//
// Text, so that `strings` on the index shows it and a newer version can add
// keys; unknown keys are ignored, a malformed value is Corruption.
#ifndef OPT4STORE_ENGINE_STORE_MANIFEST_H_
#define OPT4STORE_ENGINE_STORE_MANIFEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "opt4store/plan.h"
#include "opt4store/status.h"
#include "opt4store/store_options.h"

namespace opt4store {

constexpr char kManifestFormatKey[] = "store/format";
constexpr char kManifestFormat[] = "opt4store-store 1";
constexpr char kManifestOptionsKey[] = "store/options";
constexpr char kManifestFingerprintKey[] = "store/fingerprint";
constexpr char kManifestPlanKey[] = "store/plan";
// A file plan's copy in the store directory: this prefix, then its format
// ("plan.u32", "plan.npy", "plan.txt").
constexpr char kPlanCopyPrefix[] = "plan.";
constexpr char kManifestCursorKey[] = "store/cursor";
constexpr char kManifestLastRunKey[] = "store/last_run";

std::string EncodeManifestOptions(const StoreSettings& settings);
Status DecodeManifestOptions(std::string_view text, StoreSettings* settings);

// Generated and file plans only (an explicit plan is the caller's memory).
bool PlanIsPersistable(const PlanSpec& spec);
std::string EncodePlanSpec(const PlanSpec& spec);
Status DecodePlanSpec(std::string_view text, PlanSpec* spec);

struct Cursor {
  std::string plan;  // PlanSpec::Describe() of the plan it belongs to
  uint64_t position = 0;
  uint64_t epoch_length = 0;  // of that plan, so that the epoch can be told; 0 unknown
};
std::string EncodeCursor(const Cursor& cursor);
Status DecodeCursor(std::string_view text, Cursor* cursor);

// "key=value" lines into a map; Corruption for a line without '='.
Status ParseKeyValueLines(std::string_view text, std::map<std::string, std::string>* out);

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_MANIFEST_H_
