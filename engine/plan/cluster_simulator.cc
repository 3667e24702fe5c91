#include "opt4store/cluster_simulator.h"

#include <string>

#include "engine/plan/bit_set.h"
#include "engine/plan/cluster_passes.h"

namespace opt4store {

namespace {

constexpr ClusterPlacement kAllPlacements[] = {
    ClusterPlacement::kPerHostOpt, ClusterPlacement::kClusterOpt, ClusterPlacement::kHomeOpt,
    ClusterPlacement::kStaticPartition, ClusterPlacement::kFrequencyStatic};

}  // namespace

const char* ClusterPlacementName(ClusterPlacement placement) {
  switch (placement) {
    case ClusterPlacement::kPerHostOpt: return "per-host-opt";
    case ClusterPlacement::kClusterOpt: return "cluster-opt";
    case ClusterPlacement::kHomeOpt: return "home-opt";
    case ClusterPlacement::kStaticPartition: return "static-partition";
    case ClusterPlacement::kFrequencyStatic: return "frequency-static";
  }
  return "?";
}

Status ParseClusterPlacementList(std::string_view text, std::vector<ClusterPlacement>* out) {
  out->clear();
  if (text == "all") {
    out->assign(std::begin(kAllPlacements), std::end(kAllPlacements));
    return Status::OK();
  }
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    bool found = false;
    for (ClusterPlacement p : kAllPlacements) {
      if (name == ClusterPlacementName(p)) {
        for (ClusterPlacement q : *out) {
          if (q == p) return Status::InvalidArgument("'" + std::string(name) + "' is listed twice");
        }
        out->push_back(p);
        found = true;
      }
    }
    if (!found) {
      return Status::InvalidArgument("unknown placement '" + std::string(name) +
                                     "' (per-host-opt, cluster-opt, home-opt, static-partition, "
                                     "frequency-static or all)");
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return Status::OK();
}

Status SimulateCluster(const ClusterSimulationOptions& options, ClusterSimulationResult* result) {
  *result = ClusterSimulationResult();
  if (options.placements.empty()) return Status::InvalidArgument("no placement to simulate");
  ClusterPlan plan;
  OPT4STORE_RETURN_IF_ERROR(
      ClusterPlan::Create(options.plan, options.hosts, options.ranks_per_host, &plan));
  const ClusterShape& shape = plan.shape();
  result->shape = shape;
  if (options.capacity > shape.dataset_size) {
    return Status::InvalidArgument("capacity of " + std::to_string(options.capacity) +
                                   " items per host is larger than the dataset's " +
                                   std::to_string(shape.dataset_size) + " items");
  }

  result->placements.resize(options.placements.size());
  ClusterPlacementResult* slot[5] = {};
  for (size_t i = 0; i < options.placements.size(); ++i) {
    result->placements[i].placement = options.placements[i];
    slot[static_cast<int>(options.placements[i])] = &result->placements[i];
  }
  ClusterPlacementResult* frequency = slot[static_cast<int>(ClusterPlacement::kFrequencyStatic)];
  BitSet held;
  double held_seconds = 0;
  OPT4STORE_RETURN_IF_ERROR(HostStreamPass(
      plan, options.capacity, options.stream_memory,
      slot[static_cast<int>(ClusterPlacement::kPerHostOpt)], frequency ? &held : nullptr,
      &held_seconds, &result->stream_passes));
  OPT4STORE_RETURN_IF_ERROR(
      TimelinePass(plan, options.capacity, slot[static_cast<int>(ClusterPlacement::kClusterOpt)],
                   slot[static_cast<int>(ClusterPlacement::kHomeOpt)],
                   slot[static_cast<int>(ClusterPlacement::kStaticPartition)], frequency,
                   frequency ? &held : nullptr));
  if (frequency) frequency->seconds += held_seconds;
  for (ClusterPlacementResult& r : result->placements) {
    r.total = ClusterCounters();
    for (const ClusterCounters& c : r.host_epoch) r.total.Add(c);
  }
  return Status::OK();
}

}  // namespace opt4store
