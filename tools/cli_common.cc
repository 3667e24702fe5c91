#include "cli_common.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace opt4store {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

// Splits "a,b,c" and parses each item with parse.
template <typename T, typename Parse>
Status ParseList(std::string_view text, Parse parse, std::vector<T>* values) {
  values->clear();
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view item =
        Trim(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (item.empty()) return Status::InvalidArgument("empty value in the list " + Quote(text));
    T value;
    OPT4STORE_RETURN_IF_ERROR(parse(item, &value));
    values->push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return Status::OK();
}

// Rounds every double in *json to 6 decimal places, as "%.6f" prints it.
void RoundDoubles(nlohmann::ordered_json* json) {
  if (json->is_number_float()) {
    const double v = json->get<double>();
    if (std::isfinite(v)) *json = std::strtod(StringPrintf("%.6f", v).c_str(), nullptr);
  } else if (json->is_structured()) {
    for (nlohmann::ordered_json& element : *json) RoundDoubles(&element);
  }
}

}  // namespace

Status ParseUintList(std::string_view text, std::vector<uint64_t>* values) {
  return ParseList<uint64_t>(text, ParseCount, values);
}

Status ParseDouble(std::string_view text, double* value) {
  // strtod alone would also take spaces, "inf", "nan" and hex floats.
  bool has_digit = false;
  for (char c : text) {
    if (IsDigit(c)) {
      has_digit = true;
    } else if (c != '.' && c != '-' && c != '+' && c != 'e' && c != 'E') {
      has_digit = false;
      break;
    }
  }
  std::string copy(text);
  char* end = nullptr;
  errno = 0;
  double v = has_digit ? std::strtod(copy.c_str(), &end) : 0.0;
  if (!has_digit || end != copy.c_str() + copy.size() || errno == ERANGE || !std::isfinite(v)) {
    return Status::InvalidArgument(Quote(text) + " is not a number");
  }
  *value = v;
  return Status::OK();
}

Status ParseDoubleList(std::string_view text, std::vector<double>* values) {
  return ParseList<double>(text, ParseDouble, values);
}

Status ParseSizeList(std::string_view text, std::vector<uint64_t>* values) {
  return ParseList<uint64_t>(text, ParseSize, values);
}

std::string RejectEmpty(const std::string& value) {
  return value.empty() ? "an empty value; give one or leave the option out" : "";
}

std::string Plural(uint64_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

std::string FormatPercent(double fraction) { return StringPrintf("%.2f%%", 100.0 * fraction); }

std::string StringPrintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

CLI::Option* AddGroupedOption(CLI::App* app, const std::string& group, const std::string& flag,
                              std::string* value, const std::string& help,
                              const std::string& type_name) {
  return app->add_option(flag, *value, help)->type_name(type_name)->group(group);
}

void AddPlanOptions(CLI::App* app, const std::string& file_flag, PlanOptions* options) {
  const char* kGroup = "Plan (a file, or a generated sampler)";
  options->file_flag = file_flag;
  AddGroupedOption(app, kGroup, file_flag, &options->file,
                   "Plan file: one id per read (text, .u32, .u64 or .npy; a 2-D .npy's rows "
                   "are epochs)",
                   "FILE");
  AddGroupedOption(app, kGroup, "--sampler", &options->sampler,
                   "Generate the plan: sequential, shuffle, replacement or distributed", "KIND");
  AddGroupedOption(app, kGroup, "--dataset-size", &options->dataset_size,
                   "N: ids are in [0, N). Required with --sampler; for a file, checked "
                   "against every id (default: max id + 1)",
                   "N")
      ->check(RejectEmpty);
  AddGroupedOption(app, kGroup, "--epochs", &options->epochs, "Epochs to generate (default 1)",
                   "E");
  AddGroupedOption(app, kGroup, "--seed", &options->seed, "Sampler seed (default 0)", "S");
  AddGroupedOption(app, kGroup, "--num-samples", &options->num_samples,
                   "replacement: draws per epoch (default N)", "K");
  AddGroupedOption(app, kGroup, "--world", &options->world_size,
                   "distributed: number of ranks (default 1)", "W");
  AddGroupedOption(app, kGroup, "--rank", &options->rank,
                   "distributed: this rank, in [0, W) (default 0)", "R");
  app->add_flag("--drop-last", options->drop_last,
                "distributed: drop the tail instead of padding to a multiple of W")
      ->group(kGroup);
  AddGroupedOption(app, kGroup, "--epoch-length", &options->epoch_length,
                   "Plan file: reads per epoch (default: the whole file, or a 2-D .npy's "
                   "row length)",
                   "L");
}

bool HasPlan(const PlanOptions& o) { return !o.file.empty() || !o.sampler.empty(); }

Status BuildPlanSpec(const PlanOptions& o, PlanSpec* spec) {
  *spec = PlanSpec();
  uint64_t value = 0;
  if (!o.dataset_size.empty()) {
    OPT4STORE_RETURN_IF_ERROR(
        ParseCount(o.dataset_size, &spec->dataset_size).WithContext("--dataset-size"));
    if (spec->dataset_size == 0) {
      return Status::InvalidArgument("--dataset-size: must be at least 1");
    }
    if (spec->dataset_size > kMaxDatasetSize) {
      return Status::InvalidArgument("--dataset-size: " + o.dataset_size +
                                     " is above the maximum of " +
                                     std::to_string(kMaxDatasetSize) + " items");
    }
  }

  if (!o.file.empty()) {
    if (!o.sampler.empty()) {
      return Status::InvalidArgument("give either " + o.file_flag + " FILE or --sampler KIND, "
                                     "not both");
    }
    const std::pair<const char*, bool> generated_only[] = {
        {"--epochs", !o.epochs.empty()},          {"--seed", !o.seed.empty()},
        {"--num-samples", !o.num_samples.empty()}, {"--world", !o.world_size.empty()},
        {"--rank", !o.rank.empty()},              {"--drop-last", o.drop_last},
    };
    for (const auto& [flag, given] : generated_only) {
      if (given) {
        return Status::InvalidArgument(std::string(flag) + " applies to a generated plan "
                                       "(--sampler), not to a plan file");
      }
    }
    spec->kind = SamplerKind::kFile;
    spec->path = o.file;
    if (!o.epoch_length.empty()) {
      OPT4STORE_RETURN_IF_ERROR(
          ParseCount(o.epoch_length, &spec->epoch_length).WithContext("--epoch-length"));
      if (spec->epoch_length == 0) {
        return Status::InvalidArgument("--epoch-length: must be at least 1");
      }
    }
    return Status::OK();
  }

  if (o.sampler.empty()) {
    return Status::InvalidArgument("no plan given: pass " + o.file_flag +
                                   " FILE, or --sampler KIND --dataset-size N");
  }
  OPT4STORE_RETURN_IF_ERROR(ParseSamplerKind(o.sampler, &spec->kind).WithContext("--sampler"));
  if (spec->kind == SamplerKind::kFile || spec->kind == SamplerKind::kExplicit) {
    return Status::InvalidArgument("--sampler: use " + o.file_flag + " FILE for a plan file");
  }
  if (o.dataset_size.empty()) {
    return Status::InvalidArgument("--sampler needs --dataset-size N");
  }
  if (!o.epoch_length.empty()) {
    return Status::InvalidArgument("--epoch-length applies to a plan file; a generated "
                                   "plan's epoch length follows from its sampler");
  }
  if (!o.epochs.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.epochs, &spec->epochs).WithContext("--epochs"));
    if (spec->epochs == 0) return Status::InvalidArgument("--epochs: must be at least 1");
  }
  if (!o.seed.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.seed, &spec->seed).WithContext("--seed"));
  }
  if (!o.num_samples.empty()) {
    if (spec->kind != SamplerKind::kReplacement) {
      return Status::InvalidArgument("--num-samples applies to --sampler replacement only");
    }
    OPT4STORE_RETURN_IF_ERROR(
        ParseCount(o.num_samples, &spec->num_samples).WithContext("--num-samples"));
    if (spec->num_samples == 0) {
      return Status::InvalidArgument("--num-samples: must be at least 1");
    }
  }
  const bool distributed = spec->kind == SamplerKind::kDistributed;
  if (!distributed && (!o.world_size.empty() || !o.rank.empty() || o.drop_last)) {
    return Status::InvalidArgument("--world, --rank and --drop-last apply to --sampler "
                                   "distributed only");
  }
  if (!o.world_size.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.world_size, &value).WithContext("--world"));
    if (value == 0 || value > UINT32_MAX) {
      return Status::InvalidArgument("--world: must be in [1, " + std::to_string(UINT32_MAX) +
                                     "]");
    }
    spec->world_size = static_cast<uint32_t>(value);
  }
  if (!o.rank.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.rank, &value).WithContext("--rank"));
    if (value >= spec->world_size) {
      return Status::InvalidArgument("--rank " + o.rank + " must be less than --world " +
                                     std::to_string(spec->world_size));
    }
    spec->rank = static_cast<uint32_t>(value);
  }
  spec->drop_last = o.drop_last;
  return Status::OK();
}

TextTable::TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void TextTable::AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

std::string TextTable::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (row.size() > widths.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  size_t total = 0;
  for (size_t w : widths) total += w;
  if (!widths.empty()) total += 2 * (widths.size() - 1);

  std::string out;
  for (size_t r = 0; r < rows_.size(); ++r) {
    const auto& row = rows_[r];
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      std::string pad(widths[c] - row[c].size(), ' ');
      line += c == 0 ? row[c] + pad : pad + row[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
    if (r == 0) out += std::string(total, '-') + '\n';
  }
  return out;
}

Status WriteStdout(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() ||
      std::fflush(stdout) != 0) {
    return Status::FromErrno("writing to stdout", errno);
  }
  return Status::OK();
}

std::string JsonLine(nlohmann::ordered_json json) {
  RoundDoubles(&json);
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace opt4store
