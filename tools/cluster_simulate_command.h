// The cluster half of `opt4store simulate --hosts H`: a resolved request and
// the function that runs SimulateCluster() (cluster_simulator.h) and prints
// its table or JSON.
#ifndef OPT4STORE_TOOLS_CLUSTER_SIMULATE_COMMAND_H_
#define OPT4STORE_TOOLS_CLUSTER_SIMULATE_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "opt4store/cluster_simulator.h"
#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

struct ClusterSimulateRequest {
  ClusterSimulationOptions options;  // capacity in items per host
  uint64_t dataset_size = 0;         // N
  // --item-size: bytes per item, so that transfers become network bytes;
  // 0 = sizes unknown, network is counted in items.
  uint64_t item_size = 0;
  bool json = false;
};

Status RunClusterSimulation(const ClusterSimulateRequest& request);

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_CLUSTER_SIMULATE_COMMAND_H_
