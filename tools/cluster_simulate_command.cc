// opt4store simulate --hosts H: prints where a cluster's reads are served
// under each placement (cluster_simulator.h), as totals and as means per
// host per epoch, in a table or one deterministic JSON object.
#include "cluster_simulate_command.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "opt4store/sizes.h"

namespace opt4store {

namespace {

// The plan of every rank: Describe() names rank 0's.
std::string PlanText(const ClusterSimulateRequest& req) {
  std::string text = req.options.plan.Describe();
  const size_t at = text.find(" rank=0");
  if (at != std::string::npos) text.replace(at, 7, " ranks=all");
  return text;
}

double Per(uint64_t value, uint64_t count) {
  return count ? static_cast<double>(value) / static_cast<double>(count) : 0.0;
}

// The cluster's sum over hosts for each epoch.
std::vector<ClusterCounters> PerEpoch(const ClusterShape& shape, const ClusterPlacementResult& r) {
  std::vector<ClusterCounters> epochs(shape.epochs);
  for (uint64_t h = 0; h < shape.hosts; ++h) {
    for (uint64_t e = 0; e < shape.epochs; ++e) epochs[e].Add(r.host_epoch[h * shape.epochs + e]);
  }
  return epochs;
}

uint64_t MaxHostEpochLoads(const ClusterPlacementResult& r) {
  uint64_t most = 0;
  for (const ClusterCounters& c : r.host_epoch) most = std::max(most, c.source_loads);
  return most;
}

std::string ResultJson(const ClusterSimulateRequest& req, const ClusterSimulationResult& result) {
  const ClusterShape& s = result.shape;
  const uint64_t host_epochs = uint64_t{s.hosts} * s.epochs;
  nlohmann::ordered_json json;
  json["plan"] = PlanText(req);
  json["hosts"] = s.hosts;
  json["ranks_per_host"] = s.ranks_per_host;
  json["dataset_size"] = s.dataset_size;
  json["epochs"] = s.epochs;
  json["epoch_length"] = s.epoch_length;
  json["host_epoch_length"] = s.host_epoch_length;
  json["accesses"] = s.total_reads;
  json["capacity"] = req.options.capacity;
  json["capacity_unit"] = "items per host";
  json["capacity_ratio"] = Per(req.options.capacity, s.dataset_size);
  json["union_ratio"] = Per(req.options.capacity * s.hosts, s.dataset_size);
  if (req.item_size) json["item_size"] = req.item_size;
  json["stream_passes"] = result.stream_passes;
  nlohmann::ordered_json& placements = json["placements"];
  placements = nlohmann::ordered_json::object();
  for (const ClusterPlacementResult& r : result.placements) {
    nlohmann::ordered_json& p = placements[ClusterPlacementName(r.placement)];
    p["source_loads"] = r.total.source_loads;
    p["source_loads_per_n"] = Per(r.total.source_loads, s.dataset_size);
    p["peer_fetches"] = r.total.peer_fetches;
    p["local_hits"] = r.total.local_hits;
    p["pushes"] = r.total.pushes;
    p["transfers"] = r.total.transfers();
    if (req.item_size) p["network_bytes"] = r.total.transfers() * req.item_size;
    p["source_loads_per_host_epoch"] = Per(r.total.source_loads, host_epochs);
    p["peer_fetches_per_host_epoch"] = Per(r.total.peer_fetches, host_epochs);
    p["transfers_per_host_epoch"] = Per(r.total.transfers(), host_epochs);
    if (req.item_size) {
      p["network_bytes_per_host_epoch"] = Per(r.total.transfers() * req.item_size, host_epochs);
    }
    p["max_host_epoch_source_loads"] = MaxHostEpochLoads(r);
    nlohmann::ordered_json loads = nlohmann::ordered_json::array();
    nlohmann::ordered_json fetches = nlohmann::ordered_json::array();
    nlohmann::ordered_json transfers = nlohmann::ordered_json::array();
    for (const ClusterCounters& c : PerEpoch(s, r)) {
      loads.push_back(c.source_loads);
      fetches.push_back(c.peer_fetches);
      transfers.push_back(c.transfers());
    }
    p["per_epoch"] = {{"source_loads", loads}, {"peer_fetches", fetches},
                      {"transfers", transfers}};
  }
  return JsonLine(std::move(json));
}

// Transfers as bytes, or as items when sizes are unknown; a mean keeps a
// decimal.
std::string Network(const ClusterSimulateRequest& req, double transfers, bool mean) {
  if (req.item_size == 0) return StringPrintf(mean ? "%.1f items" : "%.0f items", transfers);
  return FormatSize(static_cast<uint64_t>(transfers * static_cast<double>(req.item_size) + 0.5));
}

std::string ResultText(const ClusterSimulateRequest& req, const ClusterSimulationResult& result) {
  const ClusterShape& s = result.shape;
  auto u = [](uint64_t v) { return std::to_string(v); };
  const uint64_t host_epochs = uint64_t{s.hosts} * s.epochs;
  std::string out;
  out += "plan:      " + PlanText(req) + "\n";
  out += "cluster:   " + Plural(s.hosts, "host") + " x " + Plural(s.ranks_per_host, "rank") +
         ", " + u(s.host_epoch_length) + " reads per host per epoch, " + u(s.total_reads) +
         " reads (" + Plural(s.epochs, "epoch") + " x " + u(s.epoch_length) + ")\n";
  out += "capacity:  " + u(req.options.capacity) + " items per host (" +
         FormatPercent(Per(req.options.capacity, s.dataset_size)) + " of " +
         u(s.dataset_size) + "); together " +
         FormatPercent(Per(req.options.capacity * s.hosts, s.dataset_size)) + "\n";
  if (req.item_size) out += "item size: " + FormatSize(req.item_size) + "\n";
  out += "\n";
  TextTable table({"placement", "source loads", "x N", "loads/host/epoch", "peer fetches",
                   "fetches/host/epoch", "network", "network/host/epoch", "local hit rate"});
  for (const ClusterPlacementResult& r : result.placements) {
    const ClusterCounters& t = r.total;
    table.AddRow({ClusterPlacementName(r.placement), u(t.source_loads),
                  StringPrintf("%.3f", Per(t.source_loads, s.dataset_size)),
                  StringPrintf("%.1f", Per(t.source_loads, host_epochs)), u(t.peer_fetches),
                  StringPrintf("%.1f", Per(t.peer_fetches, host_epochs)),
                  Network(req, static_cast<double>(t.transfers()), false),
                  Network(req, Per(t.transfers(), host_epochs), true),
                  FormatPercent(Per(t.local_hits, t.reads()))});
  }
  out += table.Render();
  out += "\nnetwork = peer fetches + pushes (a load cached on another host than the reader's)";
  out += req.item_size ? ", times the item size.\n" : "; give --item-size for bytes.\n";
  return out;
}

}  // namespace

Status RunClusterSimulation(const ClusterSimulateRequest& req) {
  ClusterSimulationResult result;
  OPT4STORE_RETURN_IF_ERROR(SimulateCluster(req.options, &result));
  return WriteStdout(req.json ? ResultJson(req, result) : ResultText(req, result));
}

}  // namespace opt4store
