// The settings table's readers and writers (opt4store/store_options.h).
#include "opt4store/store_options.h"

#include "opt4store/sizes.h"
#include "tiers/shared_memory.h"

namespace opt4store {
namespace {

Status ParseValue(std::string_view text, SettingKind kind, uint64_t* value) {
  return kind == SettingKind::kBytes ? ParseSize(text, value) : ParseCount(text, value);
}
Status ParseValue(std::string_view text, SettingKind, PolicyKind* value) {
  return ParsePolicyKind(text, value);
}
Status ParseValue(std::string_view text, SettingKind, Compression* value) {
  return ParseCompression(text, value);
}
Status ParseValue(std::string_view text, SettingKind, SyncMode* value) {
  return ParseSyncMode(text, value);
}

std::string ValueText(uint64_t value) { return std::to_string(value); }
std::string ValueText(PolicyKind value) { return PolicyName(value); }
std::string ValueText(Compression value) { return CompressionName(value); }
std::string ValueText(SyncMode value) { return SyncModeName(value); }

}  // namespace

const std::vector<SettingField>& SettingFields() {
  static const std::vector<SettingField> fields = {
#define OPT4STORE_SETTING_FIELD(name, type, kind, default_text, help) \
  {#name, SettingKind::kind, default_text, help},
      OPT4STORE_STORE_SETTINGS(OPT4STORE_SETTING_FIELD)
#undef OPT4STORE_SETTING_FIELD
  };
  return fields;
}

Status SetOption(std::string_view name, std::string_view text, StoreOptions* options) {
#define OPT4STORE_SET_OPTION(name_, type, kind, default_text, help)                          \
  if (name == #name_) {                                                                      \
    type value{};                                                                            \
    OPT4STORE_RETURN_IF_ERROR(ParseValue(text, SettingKind::kind, &value).WithContext(#name_)); \
    options->name_ = value;                                                                  \
    return Status::OK();                                                                     \
  }
  OPT4STORE_STORE_SETTINGS(OPT4STORE_SET_OPTION)
#undef OPT4STORE_SET_OPTION
  return Status::InvalidArgument("unknown setting '" + std::string(name) + "'");
}

Status CheckGivenOptions(const StoreOptions& options) {
  if (options.ram && *options.ram == 0) {
    return Status::InvalidArgument("ram=0: a RAM tier needs room for one item at least");
  }
  if (options.ram_items && *options.ram_items == 0) {
    return Status::InvalidArgument(
        "ram_items=0: a RAM tier needs room for one item at least (ram= gives bytes)");
  }
  if (options.disk && *options.disk != 0 && *options.disk < kMinDiskBytes) {
    return Status::InvalidArgument("disk=" + std::to_string(*options.disk) +
                                   " bytes is below the smallest disk tier, " +
                                   std::to_string(kMinDiskBytes / 1024) +
                                   " KiB (disk=0: no disk tier)");
  }
  static_assert(kMinQueueBytes == uint64_t{1} << 20 &&
                    SharedSegment::kMaxSegmentBytes == uint64_t{1} << 56,
                "the message below names the limits");
  if (options.queue_bytes < kMinQueueBytes ||
      options.queue_bytes > SharedSegment::kMaxSegmentBytes) {
    return Status::InvalidArgument("queue_bytes=" + std::to_string(options.queue_bytes) +
                                   " is outside 1 MiB to 2^56 bytes");
  }
  if (options.ram && options.ram_items) {
    return Status::InvalidArgument("give ram= (bytes) or ram_items= (items), not both");
  }
  if (options.fetch_timeout_ms < 0 || options.fetch_timeout_ms > kMaxFetchTimeoutMs) {
    return Status::InvalidArgument("fetch_timeout_ms=" + std::to_string(options.fetch_timeout_ms) +
                                   " is outside 0 to 2^31 - 1 ms");
  }
  if (options.shm_prefix.empty() || options.shm_prefix.find('/') != std::string::npos ||
      options.shm_prefix.size() > kMaxShmPrefixBytes) {
    return Status::InvalidArgument("shm_prefix \"" + options.shm_prefix +
                                   "\": give 1 to " + std::to_string(kMaxShmPrefixBytes) +
                                   " characters without '/'");
  }
  return Status::OK();
}

void VisitSettings(const StoreSettings& settings,
                   const std::function<void(const SettingField&, const std::string&)>& visit) {
  size_t row = 0;
#define OPT4STORE_VISIT_SETTING(name, type, kind, default_text, help) \
  visit(SettingFields()[row++], ValueText(settings.name));
  OPT4STORE_STORE_SETTINGS(OPT4STORE_VISIT_SETTING)
#undef OPT4STORE_VISIT_SETTING
}

void ApplyOptions(const StoreOptions& options, StoreSettings* settings) {
#define OPT4STORE_APPLY_OPTION(name, type, kind, default_text, help) \
  if (options.name) settings->name = *options.name;
  OPT4STORE_STORE_SETTINGS(OPT4STORE_APPLY_OPTION)
#undef OPT4STORE_APPLY_OPTION
  if (options.ram && !options.ram_items) settings->ram_items = 0;
  if (options.ram_items && !options.ram) settings->ram = 0;
}

const char* CompressionName(Compression compression) {
  return compression == Compression::kNone ? "none" : "auto";
}

Status ParseCompression(std::string_view name, Compression* compression) {
  if (name == "none") {
    *compression = Compression::kNone;
  } else if (name == "auto" || name == "lz4") {
    *compression = Compression::kAuto;
  } else {
    return Status::InvalidArgument("unknown compression '" + std::string(name) +
                                   "' (expected auto or none)");
  }
  return Status::OK();
}

const char* SyncModeName(SyncMode sync) {
  switch (sync) {
    case SyncMode::kNone:
      return "none";
    case SyncMode::kEveryPut:
      return "every";
    default:
      return "flush";
  }
}

Status ParseSyncMode(std::string_view name, SyncMode* sync) {
  if (name == "none") {
    *sync = SyncMode::kNone;
  } else if (name == "flush") {
    *sync = SyncMode::kOnFlush;
  } else if (name == "every") {
    *sync = SyncMode::kEveryPut;
  } else {
    return Status::InvalidArgument("unknown sync mode '" + std::string(name) +
                                   "' (expected none, flush or every)");
  }
  return Status::OK();
}

}  // namespace opt4store
