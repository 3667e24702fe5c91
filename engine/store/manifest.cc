#include "engine/store/manifest.h"

#include "opt4store/sizes.h"

namespace opt4store {
namespace {

void AddLine(std::string* out, const char* key, const std::string& value) {
  *out += key;
  *out += '=';
  *out += value;
  *out += '\n';
}

Status GetUint(const std::map<std::string, std::string>& kv, const char* key, uint64_t* value,
               bool required = true) {
  auto it = kv.find(key);
  if (it == kv.end()) {
    if (required) return Status::Corruption(std::string("manifest: missing '") + key + "'");
    return Status::OK();
  }
  if (!ParseCount(it->second, value).ok()) {
    return Status::Corruption(std::string("manifest: '") + key + "' is not a number: '" +
                              it->second + "'");
  }
  return Status::OK();
}

}  // namespace

Status ParseKeyValueLines(std::string_view text, std::map<std::string, std::string>* out) {
  out->clear();
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::Corruption("manifest: line without '=': '" + std::string(line) + "'");
    }
    (*out)[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return Status::OK();
}

std::string EncodeManifestOptions(const StoreSettings& settings) {
  std::string out;
  AddLine(&out, "dataset_size", std::to_string(settings.dataset_size));
  VisitSettings(settings, [&out](const SettingField& field, const std::string& text) {
    AddLine(&out, field.name, text);
  });
  return out;
}

Status DecodeManifestOptions(std::string_view text, StoreSettings* settings) {
  std::map<std::string, std::string> kv;
  OPT4STORE_RETURN_IF_ERROR(ParseKeyValueLines(text, &kv));
  // The names of the settings before the table named them.
  const std::pair<const char*, const char*> renamed[] = {
      {"ram_bytes", "ram"}, {"disk_bytes", "disk"}, {"staging_bytes", "staging"}};
  for (const auto& [old_name, name] : renamed) {
    auto it = kv.find(old_name);
    if (it != kv.end() && kv.count(name) == 0) kv[name] = it->second;
  }
  StoreSettings s;
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "dataset_size", &s.dataset_size));
  StoreOptions given;
  for (const SettingField& field : SettingFields()) {
    auto it = kv.find(field.name);
    if (it == kv.end()) {
      return Status::Corruption(std::string("manifest: missing '") + field.name + "'");
    }
    Status set = SetOption(field.name, it->second, &given);
    if (!set.ok()) return Status::Corruption("manifest: " + set.message());
  }
  ApplyOptions(given, &s);
  *settings = s;
  return Status::OK();
}

bool PlanIsPersistable(const PlanSpec& spec) { return spec.kind != SamplerKind::kExplicit; }

std::string EncodePlanSpec(const PlanSpec& spec) {
  std::string out;
  AddLine(&out, "kind", SamplerName(spec.kind));
  AddLine(&out, "dataset_size", std::to_string(spec.dataset_size));
  AddLine(&out, "epochs", std::to_string(spec.epochs));
  AddLine(&out, "seed", std::to_string(spec.seed));
  AddLine(&out, "num_samples", std::to_string(spec.num_samples));
  AddLine(&out, "world_size", std::to_string(spec.world_size));
  AddLine(&out, "rank", std::to_string(spec.rank));
  AddLine(&out, "drop_last", spec.drop_last ? "1" : "0");
  AddLine(&out, "epoch_length", std::to_string(spec.epoch_length));
  if (spec.kind == SamplerKind::kFile) AddLine(&out, "path", spec.path);
  return out;
}

Status DecodePlanSpec(std::string_view text, PlanSpec* spec) {
  std::map<std::string, std::string> kv;
  OPT4STORE_RETURN_IF_ERROR(ParseKeyValueLines(text, &kv));
  PlanSpec p;
  Status s = ParseSamplerKind(kv["kind"], &p.kind);
  if (!s.ok()) return Status::Corruption("manifest plan: " + s.message());
  uint64_t world = 1, rank = 0, drop_last = 0;
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "dataset_size", &p.dataset_size));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "epochs", &p.epochs));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "seed", &p.seed));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "num_samples", &p.num_samples));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "world_size", &world));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "rank", &rank));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "drop_last", &drop_last));
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "epoch_length", &p.epoch_length));
  p.world_size = static_cast<uint32_t>(world);
  p.rank = static_cast<uint32_t>(rank);
  p.drop_last = drop_last != 0;
  if (p.kind == SamplerKind::kFile) p.path = kv["path"];
  *spec = std::move(p);
  return Status::OK();
}

std::string EncodeCursor(const Cursor& cursor) {
  std::string out;
  AddLine(&out, "plan", cursor.plan);
  AddLine(&out, "position", std::to_string(cursor.position));
  AddLine(&out, "epoch_length", std::to_string(cursor.epoch_length));
  return out;
}

Status DecodeCursor(std::string_view text, Cursor* cursor) {
  std::map<std::string, std::string> kv;
  OPT4STORE_RETURN_IF_ERROR(ParseKeyValueLines(text, &kv));
  cursor->plan = kv["plan"];
  cursor->epoch_length = 0;
  OPT4STORE_RETURN_IF_ERROR(GetUint(kv, "epoch_length", &cursor->epoch_length, false));
  return GetUint(kv, "position", &cursor->position);
}

}  // namespace opt4store
