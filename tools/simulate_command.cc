// opt4store simulate: replays one plan through several cache policies at one
// or more capacities (Simulate() in simulator.h) and prints their hit rates,
// as an aligned table or as one deterministic JSON object.
#include "simulate_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "cluster_simulate_command.h"
#include "commands.h"
#include "opt4store/item_sizes.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/ram_units.h"
#include "opt4store/simulator.h"
#include "opt4store/status.h"

namespace opt4store {

namespace {

struct SimulateCommandOptions {
  PlanOptions plan;
  std::string capacity;
  std::string capacity_ratio;
  std::string capacity_bytes;
  std::string sizes;
  std::string item_size;
  std::string policy = "all";
  std::string window;
  std::string policy_seed;
  bool curve = false;
  bool json = false;
  // A cluster (cluster_simulate_command.h).
  std::string hosts;
  std::string ranks_per_host;
  std::string placement;
};

// The ratios --curve uses when no capacity is given.
std::vector<double> DefaultCurveRatios() {
  std::vector<double> ratios;
  for (int k = 1; k <= 9; ++k) ratios.push_back(k / 10.0);
  return ratios;
}

std::string DatasetText(const SimulateRequest& r) {
  std::string text = std::to_string(r.dataset_size) + " items";
  if (r.bytes_mode) text += ", " + FormatSize(r.total_bytes);
  return text;
}

std::string CapacityText(const SimulateRequest& r, uint64_t capacity) {
  return r.bytes_mode ? FormatSize(capacity) : std::to_string(capacity);
}

// Resolves the command line into a request: opens the plan once for its
// shape, loads sizes, and turns every capacity form into numbers.
Status BuildRequest(const SimulateCommandOptions& o, SimulateRequest* r) {
  PlanSpec spec;
  OPT4STORE_RETURN_IF_ERROR(BuildPlanSpec(o.plan, &spec));

  const int forms = !o.capacity.empty() + !o.capacity_ratio.empty() + !o.capacity_bytes.empty();
  if (forms > 1) {
    return Status::InvalidArgument("give one of --capacity, --capacity-ratio and "
                                   "--capacity-bytes");
  }
  if (!o.sizes.empty() && !o.item_size.empty()) {
    return Status::InvalidArgument("give --sizes FILE or --item-size BYTES, not both");
  }
  r->bytes_mode = !o.sizes.empty() || !o.item_size.empty();
  if (!o.capacity.empty() && r->bytes_mode) {
    return Status::InvalidArgument("--capacity counts items; with --sizes or --item-size give "
                                   "--capacity-bytes or --capacity-ratio");
  }
  if (!o.capacity_bytes.empty() && !r->bytes_mode) {
    return Status::InvalidArgument("--capacity-bytes needs item sizes: --sizes FILE or "
                                   "--item-size BYTES");
  }
  if (forms == 0 && !o.curve) {
    return Status::InvalidArgument("no capacity: give --capacity N, --capacity-ratio R, "
                                   "--capacity-bytes B (with --sizes or --item-size), or --curve");
  }

  SimulationOptions& sim = r->options;
  OPT4STORE_RETURN_IF_ERROR(ParsePolicyList(o.policy, &sim.policies).WithContext("--policy"));
  if (!o.window.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.window, &sim.window).WithContext("--window"));
  }
  if (!o.policy_seed.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.policy_seed, &sim.seed).WithContext("--policy-seed"));
  }

  // A sizes file lists every id of the dataset, so it defines the dataset
  // size when a plan file leaves it open (the plan may not read every id).
  ItemSizes sizes;
  bool sizes_loaded = false;
  if (!o.sizes.empty() && spec.dataset_size == 0) {
    OPT4STORE_RETURN_IF_ERROR(ItemSizes::FromFile(o.sizes, 0, &sizes).WithContext("--sizes"));
    spec.dataset_size = sizes.num_ids();
    sizes_loaded = true;
  }
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(spec, &source));
  r->dataset_size = source->shape().dataset_size;
  source.reset();
  const uint64_t n = r->dataset_size;

  if (!o.sizes.empty()) {
    if (!sizes_loaded) {
      OPT4STORE_RETURN_IF_ERROR(ItemSizes::FromFile(o.sizes, n, &sizes).WithContext("--sizes"));
    }
    r->total_bytes = sizes.Total();
    sim.sizes = std::move(sizes);
    sim.ram_units = true;  // each item in the RAM tier's whole units, as the store counts
  } else if (!o.item_size.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseSize(o.item_size, &r->item_size).WithContext("--item-size"));
    if (r->item_size == 0) return Status::InvalidArgument("--item-size: must be at least 1 byte");
    if (r->item_size > UINT64_MAX / n) {
      return Status::InvalidArgument("--item-size: the dataset's total size overflows 64 bits");
    }
    r->total_bytes = r->item_size * n;
  }
  sim.plan = spec;

  // Capacities as the user sees them: items, or bytes in bytes_mode.
  const uint64_t whole = r->bytes_mode ? r->total_bytes : n;
  const std::string dataset = DatasetText(*r);
  std::vector<uint64_t>& caps = r->capacities;
  if (!o.capacity.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseUintList(o.capacity, &caps).WithContext("--capacity"));
  } else if (!o.capacity_bytes.empty()) {
    OPT4STORE_RETURN_IF_ERROR(
        ParseSizeList(o.capacity_bytes, &caps).WithContext("--capacity-bytes"));
  } else {
    std::vector<double> ratios = DefaultCurveRatios();
    if (!o.capacity_ratio.empty()) {
      OPT4STORE_RETURN_IF_ERROR(
          ParseDoubleList(o.capacity_ratio, &ratios).WithContext("--capacity-ratio"));
    }
    for (double ratio : ratios) {
      if (!(ratio > 0.0 && ratio <= 1.0)) {
        return Status::InvalidArgument("--capacity-ratio: " + StringPrintf("%g", ratio) +
                                       " is not in (0, 1]");
      }
      caps.push_back(static_cast<uint64_t>(
          std::llround(static_cast<long double>(ratio) * static_cast<long double>(whole))));
    }
  }
  for (uint64_t c : caps) {
    if (c > whole) {
      const char* flag = !o.capacity.empty() ? "--capacity" : "--capacity-bytes";
      return Status::InvalidArgument(std::string(flag) + " " + CapacityText(*r, c) +
                                     " is larger than the dataset (" + dataset + ")");
    }
    // Equal sizes: the capacity in items, each in the RAM tier's whole units.
    sim.capacities.push_back(r->item_size ? c / InRamUnits(r->item_size, RamUnitBytes(c)) : c);
  }
  r->curve = o.curve || caps.size() > 1;
  r->json = o.json;
  return Status::OK();
}

void ByteCounters(const SimulateRequest& r, uint64_t accesses, const PolicyResult& p,
                  uint64_t* hit, uint64_t* read) {
  if (r.item_size) {
    *hit = p.counters.hits * r.item_size;
    *read = accesses * r.item_size;
  } else {
    *hit = p.bytes_hit;
    *read = p.bytes_read;
  }
}

double Ratio(const SimulateRequest& r, uint64_t capacity) {
  const uint64_t whole = r.bytes_mode ? r.total_bytes : r.dataset_size;
  return whole ? static_cast<double>(capacity) / static_cast<double>(whole) : 0.0;
}

nlohmann::ordered_json PoliciesJson(const SimulateRequest& r, uint64_t accesses,
                                    const CapacityResult& point) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const PolicyResult& p : point.policies) {
    nlohmann::ordered_json& policy = json[PolicyName(p.kind)];
    policy["hits"] = p.counters.hits;
    policy["misses"] = p.counters.misses;
    policy["hit_rate"] = p.hit_rate(accesses);
    policy["admissions"] = p.counters.admissions;
    policy["bypasses"] = p.counters.bypasses;
    policy["evictions"] = p.counters.evictions;
    policy["ambiguous"] = p.counters.ambiguous;
    if (r.bytes_mode) {
      uint64_t hit = 0, read = 0;
      ByteCounters(r, accesses, p, &hit, &read);
      policy["bytes_hit"] = hit;
      policy["bytes_read"] = read;
      policy["byte_hit_rate"] = read ? static_cast<double>(hit) / static_cast<double>(read) : 0.0;
    }
  }
  return json;
}

// No timings: the same command prints the same bytes.
std::string ResultJson(const SimulateRequest& r, const SimulationResult& result) {
  nlohmann::ordered_json json;
  json["accesses"] = result.accesses;
  json["plan"] = r.options.plan.Describe();
  json["dataset_size"] = r.dataset_size;
  json["distinct_ids"] = result.distinct_ids;
  json["epochs"] = result.shape.epochs;
  json["epoch_length"] = result.shape.epoch_length;
  json["window"] = result.window;
  json["exact_window"] = result.exact_window;
  json["capacity_unit"] = r.bytes_mode ? "bytes" : "items";
  if (r.bytes_mode) json["total_bytes"] = r.total_bytes;
  if (r.item_size) json["item_size"] = r.item_size;
  if (!r.curve) {
    json["capacity"] = r.capacities[0];
    json["capacity_ratio"] = Ratio(r, r.capacities[0]);
    json["policies"] = PoliciesJson(r, result.accesses, result.points[0]);
  } else {
    json["curve"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < result.points.size(); ++i) {
      json["curve"].push_back({{"capacity", r.capacities[i]},
                               {"capacity_ratio", Ratio(r, r.capacities[i])},
                               {"policies", PoliciesJson(r, result.accesses, result.points[i])}});
    }
  }
  return JsonLine(std::move(json));
}

std::string HeaderText(const SimulateRequest& r, const SimulationResult& result) {
  auto u = [](uint64_t v) { return std::to_string(v); };
  std::string out;
  out += "plan:      " + r.options.plan.Describe() + "\n";
  out += "reads:     " + u(result.accesses) + " (" + Plural(result.shape.epochs, "epoch") + " x " +
         u(result.shape.epoch_length) + "), " + u(result.distinct_ids) + " distinct ids of " +
         DatasetText(r) + "\n";
  out += "window:    " + u(result.window) + " positions" +
         (result.exact_window ? " (the whole plan: opt is exact)\n" : "\n");
  if (!r.curve) {
    out += "capacity:  " + CapacityText(r, r.capacities[0]) + (r.bytes_mode ? "" : " items") +
           " (" + FormatPercent(Ratio(r, r.capacities[0])) + " of the dataset)\n";
  }
  return out;
}

std::string SingleTable(const SimulateRequest& r, const SimulationResult& result) {
  const bool byte_column = r.bytes_mode && r.item_size == 0;
  std::vector<std::string> header = {"policy", "hits", "hit rate"};
  if (byte_column) header.push_back("byte hit rate");
  header.insert(header.end(), {"bypasses", "evictions"});
  TextTable table(std::move(header));
  for (const PolicyResult& p : result.points[0].policies) {
    std::vector<std::string> row = {PolicyName(p.kind), std::to_string(p.counters.hits),
                                    FormatPercent(p.hit_rate(result.accesses))};
    if (byte_column) row.push_back(FormatPercent(p.byte_hit_rate()));
    row.push_back(std::to_string(p.counters.bypasses));
    row.push_back(std::to_string(p.counters.evictions));
    table.AddRow(std::move(row));
  }
  return table.Render();
}

// One row per capacity, one column per policy.
std::string CurveTable(const SimulateRequest& r, const SimulationResult& result,
                       bool byte_hit_rate) {
  std::vector<std::string> header = {"capacity", "ratio"};
  for (PolicyKind kind : r.options.policies) header.push_back(PolicyName(kind));
  TextTable table(std::move(header));
  for (size_t i = 0; i < result.points.size(); ++i) {
    std::vector<std::string> row = {CapacityText(r, r.capacities[i]),
                                    FormatPercent(Ratio(r, r.capacities[i]))};
    for (const PolicyResult& p : result.points[i].policies) {
      row.push_back(FormatPercent(byte_hit_rate ? p.byte_hit_rate()
                                                : p.hit_rate(result.accesses)));
    }
    table.AddRow(std::move(row));
  }
  return table.Render();
}

// Non-empty when opt ran on a window too short to know every next use.
std::string AmbiguityNote(const SimulationResult& result) {
  uint64_t ambiguous = 0;
  for (const CapacityResult& point : result.points) {
    for (const PolicyResult& p : point.policies) {
      if (p.kind == PolicyKind::kOpt || p.kind == PolicyKind::kOptSize) {
        ambiguous = std::max(ambiguous, p.counters.ambiguous);
      }
    }
  }
  if (ambiguous == 0) return "";
  return StringPrintf(
      "note: the look-ahead window (%llu positions) is shorter than the plan (%llu reads), so "
      "opt made %llu decisions between items whose next reads it could not see and may fall "
      "short of exact OPT; pass --window %llu for exact OPT\n",
      static_cast<unsigned long long>(result.window),
      static_cast<unsigned long long>(result.accesses),
      static_cast<unsigned long long>(ambiguous),
      static_cast<unsigned long long>(result.accesses));
}

// --hosts: the plan becomes every rank of a distributed plan, and the
// capacity each host's budget.
Status RunClusterCommand(SimulateCommandOptions o) {
  if (o.hosts.empty()) {
    return Status::InvalidArgument("--ranks-per-host and --placement need --hosts H");
  }
  uint64_t hosts = 0;
  uint64_t ranks_per_host = 1;
  OPT4STORE_RETURN_IF_ERROR(ParseCount(o.hosts, &hosts).WithContext("--hosts"));
  if (hosts == 0 || hosts > 65536) return Status::InvalidArgument("--hosts: must be in [1, 65536]");
  if (!o.ranks_per_host.empty()) {
    OPT4STORE_RETURN_IF_ERROR(
        ParseCount(o.ranks_per_host, &ranks_per_host).WithContext("--ranks-per-host"));
    if (ranks_per_host == 0 || hosts * ranks_per_host > UINT32_MAX) {
      return Status::InvalidArgument("--ranks-per-host: must be at least 1, and hosts x ranks "
                                     "below 2^32");
    }
  }
  if (o.plan.sampler != "distributed") {
    return Status::InvalidArgument("--hosts needs --sampler distributed (DistributedSampler's "
                                   "plan for every rank)");
  }
  if (!o.plan.rank.empty()) {
    return Status::InvalidArgument("--rank: with --hosts every rank is simulated");
  }
  const std::string world = std::to_string(hosts * ranks_per_host);
  if (o.plan.world_size.empty()) {
    o.plan.world_size = world;
  } else if (o.plan.world_size != world) {
    return Status::InvalidArgument("--world " + o.plan.world_size + " is not --hosts x "
                                   "--ranks-per-host = " + world);
  }
  const std::pair<const char*, bool> single_cache_only[] = {
      {"--curve", o.curve},           {"--sizes", !o.sizes.empty()},
      {"--window", !o.window.empty()}, {"--policy-seed", !o.policy_seed.empty()},
      {"--policy", o.policy != "all"},
  };
  for (const auto& [flag, given] : single_cache_only) {
    if (given) {
      return Status::InvalidArgument(std::string(flag) + " does not apply with --hosts (items "
                                     "of one size, --item-size; placements, --placement)");
    }
  }
  SimulateRequest single;
  OPT4STORE_RETURN_IF_ERROR(BuildRequest(o, &single));
  if (single.options.capacities.size() != 1) {
    return Status::InvalidArgument("--hosts takes one capacity per run");
  }
  ClusterSimulateRequest r;
  ClusterSimulationOptions& c = r.options;
  c.plan = single.options.plan;
  c.hosts = static_cast<uint32_t>(hosts);
  c.ranks_per_host = static_cast<uint32_t>(ranks_per_host);
  c.capacity = single.options.capacities[0];  // items: --item-size already divided
  OPT4STORE_RETURN_IF_ERROR(
      ParseClusterPlacementList(o.placement.empty() ? "all" : o.placement, &c.placements)
          .WithContext("--placement"));
  r.dataset_size = single.dataset_size;
  r.item_size = single.item_size;
  r.json = o.json;
  return RunClusterSimulation(r);
}

Status RunSimulateCommand(const SimulateCommandOptions& options) {
  if (!options.hosts.empty() || !options.ranks_per_host.empty() || !options.placement.empty()) {
    return RunClusterCommand(options);
  }
  SimulateRequest request;
  OPT4STORE_RETURN_IF_ERROR(BuildRequest(options, &request));
  return RunSimulation(request);
}

}  // namespace

Status RunSimulation(const SimulateRequest& r) {
  if (r.capacities.size() != r.options.capacities.size() || r.capacities.empty()) {
    return Status::InvalidArgument("simulate: capacities do not match");
  }
  SimulationResult result;
  OPT4STORE_RETURN_IF_ERROR(Simulate(r.options, &result));
  if (result.points.size() != r.capacities.size()) {
    return Status::Corruption("simulator returned " + std::to_string(result.points.size()) +
                              " points for " + std::to_string(r.capacities.size()) +
                              " capacities");
  }
  for (const CapacityResult& point : result.points) {
    if (point.policies.size() != r.options.policies.size()) {
      return Status::Corruption("simulator returned a point without every policy");
    }
  }

  const std::string note = AmbiguityNote(result);
  if (r.json) {
    // stdout holds only the JSON object; the note goes to stderr.
    if (!note.empty()) std::fputs(note.c_str(), stderr);
    return WriteStdout(ResultJson(r, result));
  }
  std::string out = HeaderText(r, result) + "\n";
  if (!r.curve) {
    out += SingleTable(r, result);
  } else {
    out += "hit rate by capacity (rows) and policy (columns):\n\n";
    out += CurveTable(r, result, false);
    if (r.bytes_mode && r.item_size == 0) {
      out += "\nbyte hit rate by capacity (rows) and policy (columns):\n\n";
      out += CurveTable(r, result, true);
    }
  }
  if (!note.empty()) out += "\n" + note;
  return WriteStdout(out);
}

Command AddSimulateCommand(CLI::App* parent) {
  auto options = std::make_shared<SimulateCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "simulate",
      "Replay a plan through cache policies and compare their hit rates.\n"
      "  opt4store simulate --plan p.npy --capacity-ratio 0.2 --policy opt,lru\n"
      "  opt4store simulate --sampler shuffle --dataset-size 1000 --epochs 3 --curve --json\n"
      "  opt4store simulate --hosts 8 --sampler distributed --dataset-size 1281167 --epochs 90 "
      "--capacity-ratio 0.1");
  AddPlanOptions(app, "--plan", &options->plan);
  const char* kCapacity = "Capacity (lists are comma-separated; several values make a curve)";
  AddGroupedOption(app, kCapacity, "--capacity", &options->capacity, "Cache capacity in items",
                   "N[,N...]");
  AddGroupedOption(app, kCapacity, "--capacity-ratio", &options->capacity_ratio,
                   "Capacity as a fraction in (0, 1] of the dataset's items, or of its bytes "
                   "with --sizes/--item-size",
                   "R[,R...]");
  AddGroupedOption(app, kCapacity, "--capacity-bytes", &options->capacity_bytes,
                   "Capacity in bytes (suffixes KiB, MiB, GiB, TiB, KB, MB, GB, TB); needs "
                   "--sizes or --item-size",
                   "B[,B...]");
  AddGroupedOption(app, kCapacity, "--sizes", &options->sizes,
                   "Number file whose i-th value is the byte size of id i (each counted in "
                   "the RAM tier's whole units, 64 bytes up to 256 GiB, as the store does)",
                   "FILE");
  AddGroupedOption(app, kCapacity, "--item-size", &options->item_size,
                   "Every item is this many bytes (in whole units, as --sizes)",
                   "BYTES");
  app->add_flag("--curve", options->curve,
                "Print a curve; without a capacity, ratios 0.1, 0.2, ..., 0.9")
      ->group(kCapacity);
  app->add_option("--policy", options->policy,
                  "'all' or a comma-separated list of: opt, opt-size, lru, lfu, fifo, random, "
                  "static, none (default all)")
      ->type_name("LIST");
  app->add_option("--window", options->window,
                  "Look-ahead in positions for opt (default: the whole plan, up to 8 Mi)")
      ->type_name("N");
  app->add_option("--policy-seed", options->policy_seed, "Seed of the random policy (default 0)")
      ->type_name("S");
  const char* kCluster = "Cluster (a distributed plan read by several hosts)";
  AddGroupedOption(app, kCluster, "--hosts", &options->hosts,
                   "Simulate H hosts, each with the capacity as its RAM budget; the plan is "
                   "every rank of --sampler distributed",
                   "H");
  AddGroupedOption(app, kCluster, "--ranks-per-host", &options->ranks_per_host,
                   "Ranks on each host (default 1); --world is hosts x ranks per host", "R");
  AddGroupedOption(app, kCluster, "--placement", &options->placement,
                   "'all' or a comma-separated list of: per-host-opt, cluster-opt, home-opt, "
                   "static-partition, frequency-static (default all)",
                   "LIST");
  app->add_flag("--json", options->json, "Print one JSON object instead of a table");
  return Command{app, [options] { return RunSimulateCommand(*options); }};
}

}  // namespace opt4store
