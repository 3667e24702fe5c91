// opt4store plan: writes a generated plan to a number file (--output), or
// summarises a plan, generated or from a file (--info).
//
// --info streams the plan once in chunks and keeps one last-read position per
// dataset id: O(dataset size) memory whatever the plan's length.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/number_file.h"
#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

namespace {

constexpr size_t kChunk = size_t{1} << 16;  // ids per PlanSource::Read
constexpr uint64_t kUnseen = UINT64_MAX;

struct PlanCommandOptions {
  PlanOptions plan;
  std::string output;
  std::string format;
  bool info = false;
  bool json = false;
};

// What --info reports.
struct PlanInfo {
  std::string description;
  PlanShape shape;
  uint64_t reads = 0;
  uint64_t distinct_ids = 0;
  uint64_t cold_reads = 0;  // first read of an id; equals distinct_ids
  // Reuse distance: positions between consecutive reads of the same id.
  uint64_t reuse_count = 0;
  uint64_t reuse_min = 0;
  uint64_t reuse_max = 0;
  long double reuse_sum = 0;  // can pass 2^64 on long plans
  // histogram[k] counts distances in [2^k, 2^(k+1)).
  std::vector<uint64_t> histogram;

  double reuse_mean() const {
    return reuse_count ? static_cast<double>(reuse_sum / reuse_count) : 0.0;
  }
};

int FloorLog2(uint64_t v) { return 63 - __builtin_clzll(v); }

Status WritePlan(const PlanSpec& spec, const PlanCommandOptions& options) {
  NumberFormat format = NumberFormatFromPath(options.output);
  if (!options.format.empty()) {
    NumberFormat requested;
    OPT4STORE_RETURN_IF_ERROR(
        ParseNumberFormat(options.format, &requested).WithContext("--format"));
    // Readers pick the format by extension, so a mismatch would not read back.
    if (requested != format) {
      return Status::InvalidArgument(
          "--format " + options.format + ": " + options.output + " would be read back as " +
          NumberFormatName(format) + "; name it with the extension of the format (." +
          (requested == NumberFormat::kText ? std::string("txt") : options.format) + ")");
    }
  }

  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(spec, &source));
  const PlanShape shape = source->shape();
  // A 2-D .npy keeps the epochs apart: one row per epoch.
  const uint64_t rows = format == NumberFormat::kNpy && shape.epochs > 1 ? shape.epochs : 0;

  std::unique_ptr<NumberFileWriter> writer;
  OPT4STORE_RETURN_IF_ERROR(
      NumberFileWriter::Open(options.output, format, shape.total_reads, rows, &writer));
  std::vector<ItemId> ids(kChunk);
  std::vector<uint64_t> wide(kChunk);
  uint64_t written = 0;
  while (true) {
    size_t count = 0;
    OPT4STORE_RETURN_IF_ERROR(source->Read(ids.data(), ids.size(), &count));
    if (count == 0) break;
    if (written + count > shape.total_reads) break;  // reported below
    std::copy(ids.begin(), ids.begin() + count, wide.begin());
    OPT4STORE_RETURN_IF_ERROR(writer->Append(wide.data(), count));
    written += count;
  }
  if (written != shape.total_reads) {
    return Status::Corruption("plan source gave " + std::to_string(written) + " reads, its " +
                              "shape promised " + std::to_string(shape.total_reads));
  }
  OPT4STORE_RETURN_IF_ERROR(writer->Finish());
  return WriteStdout(StringPrintf(
      "wrote %s (%s x %llu) of %s to %s (%s)\n", Plural(shape.total_reads, "read").c_str(),
      Plural(shape.epochs, "epoch").c_str(), static_cast<unsigned long long>(shape.epoch_length),
      spec.Describe().c_str(),
      options.output.c_str(), NumberFormatName(format)));
}

Status ComputeInfo(const PlanSpec& spec, PlanInfo* info) {
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(spec, &source));
  info->description = spec.Describe();
  info->shape = source->shape();
  info->histogram.assign(64, 0);

  std::vector<uint64_t> last(info->shape.dataset_size, kUnseen);
  std::vector<ItemId> ids(kChunk);
  uint64_t pos = 0;
  while (true) {
    size_t count = 0;
    OPT4STORE_RETURN_IF_ERROR(source->Read(ids.data(), ids.size(), &count));
    if (count == 0) break;
    for (size_t i = 0; i < count; ++i, ++pos) {
      const ItemId id = ids[i];
      if (id >= last.size()) {
        return Status::OutOfRange("plan position " + std::to_string(pos) + ": id " +
                                  std::to_string(id) + " is not below the dataset size " +
                                  std::to_string(last.size()));
      }
      if (last[id] == kUnseen) {
        ++info->cold_reads;
      } else {
        const uint64_t d = pos - last[id];
        info->reuse_min = info->reuse_count == 0 ? d : std::min(info->reuse_min, d);
        info->reuse_max = std::max(info->reuse_max, d);
        info->reuse_sum += d;
        ++info->reuse_count;
        ++info->histogram[FloorLog2(d)];
      }
      last[id] = pos;
    }
  }
  info->reads = pos;
  info->distinct_ids = info->cold_reads;
  // Keep the histogram up to its last non-empty bucket.
  while (!info->histogram.empty() && info->histogram.back() == 0) info->histogram.pop_back();
  return Status::OK();
}

std::string InfoJson(const PlanInfo& info) {
  nlohmann::ordered_json histogram = nlohmann::ordered_json::array();
  for (size_t k = 0; k < info.histogram.size(); ++k) {
    histogram.push_back({{"min", uint64_t{1} << k},
                         {"max", (uint64_t{1} << k) * 2 - 1},
                         {"count", info.histogram[k]}});
  }
  nlohmann::ordered_json json;
  json["plan"] = info.description;
  json["reads"] = info.reads;
  json["epochs"] = info.shape.epochs;
  json["epoch_length"] = info.shape.epoch_length;
  json["dataset_size"] = info.shape.dataset_size;
  json["distinct_ids"] = info.distinct_ids;
  json["cold_reads"] = info.cold_reads;
  json["reuse_distance"] = {{"count", info.reuse_count},
                            {"min", info.reuse_min},
                            {"mean", info.reuse_mean()},
                            {"max", info.reuse_max},
                            {"histogram", std::move(histogram)}};
  return JsonLine(std::move(json));
}

std::string InfoText(const PlanInfo& info) {
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto share = [](uint64_t part, uint64_t whole) {
    return whole ? FormatPercent(static_cast<double>(part) / static_cast<double>(whole))
                 : std::string("-");
  };
  std::string out;
  out += "plan:          " + info.description + "\n";
  out += "reads:         " + u(info.reads) + "\n";
  out += "epochs:        " + u(info.shape.epochs) + "\n";
  out += "epoch length:  " + u(info.shape.epoch_length) + "\n";
  out += "dataset size:  " + u(info.shape.dataset_size) + "\n";
  out += "distinct ids:  " + u(info.distinct_ids) + " (" +
         share(info.distinct_ids, info.shape.dataset_size) + " of the dataset)\n";
  out += "cold reads:    " + u(info.cold_reads) + " (" + share(info.cold_reads, info.reads) +
         " of reads: first read of an id)\n";
  out += "reuse distance (positions between consecutive reads of the same id):\n";
  if (info.reuse_count == 0) {
    out += "  none: no id is read twice\n";
    return out;
  }
  out += StringPrintf("  count %llu, min %llu, mean %.2f, max %llu\n\n",
                      static_cast<unsigned long long>(info.reuse_count),
                      static_cast<unsigned long long>(info.reuse_min), info.reuse_mean(),
                      static_cast<unsigned long long>(info.reuse_max));
  TextTable table({"distance", "reads", "share"});
  for (size_t k = 0; k < info.histogram.size(); ++k) {
    const uint64_t lo = uint64_t{1} << k;
    const uint64_t hi = lo * 2 - 1;
    table.AddRow({lo == hi ? u(lo) : u(lo) + "-" + u(hi), u(info.histogram[k]),
                  share(info.histogram[k], info.reuse_count)});
  }
  return out + table.Render();
}

Status RunPlan(const PlanCommandOptions& options) {
  if (options.info == !options.output.empty()) {
    return Status::InvalidArgument(options.info
                                       ? "give --output FILE or --info, not both"
                                       : "nothing to do: give --output FILE to write a plan, "
                                         "or --info to summarise one");
  }
  if (options.json && !options.info) return Status::InvalidArgument("--json applies to --info");
  if (!options.format.empty() && options.output.empty()) {
    return Status::InvalidArgument("--format applies to --output");
  }
  PlanSpec spec;
  OPT4STORE_RETURN_IF_ERROR(BuildPlanSpec(options.plan, &spec));
  if (!options.info) return WritePlan(spec, options);

  PlanInfo info;
  OPT4STORE_RETURN_IF_ERROR(ComputeInfo(spec, &info));
  return WriteStdout(options.json ? InfoJson(info) : InfoText(info));
}

}  // namespace

Command AddPlanCommand(CLI::App* parent) {
  auto options = std::make_shared<PlanCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "plan",
      "Write a plan (the order of sample reads) to a file, or summarise one with --info.\n"
      "  opt4store plan --sampler shuffle --dataset-size 1000 --epochs 3 --output p.npy\n"
      "  opt4store plan --input p.npy --info");
  AddPlanOptions(app, "--input", &options->plan);
  app->add_option("--output", options->output,
                  "Write the plan here; the extension picks the format: .u32, .u64, .npy "
                  "(2-D, one row per epoch, when epochs > 1), else text")
      ->type_name("FILE");
  app->add_option("--format", options->format,
                  "txt, u32, u64 or npy; must agree with --output's extension")
      ->type_name("FMT");
  app->add_flag("--info", options->info,
                "Summarise the plan: reads, epochs, distinct ids, cold reads, reuse distances");
  app->add_flag("--json", options->json, "With --info: print one JSON object");
  return Command{app, [options] { return RunPlan(*options); }};
}

}  // namespace opt4store
