// The simulate command's core, shared with demo: a fully resolved request
// (plan, policies, capacities) and the function that runs and prints it.
#ifndef OPT4STORE_TOOLS_SIMULATE_COMMAND_H_
#define OPT4STORE_TOOLS_SIMULATE_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "opt4store/simulator.h"
#include "opt4store/status.h"

namespace opt4store {

struct SimulateRequest {
  // What the simulator runs. options.capacities are in its cost units: items,
  // or bytes when options.sizes holds per-item sizes.
  SimulationOptions options;
  // The same capacities as reported: items, or bytes when bytes_mode.
  std::vector<uint64_t> capacities;
  // Capacities are reported in bytes (--sizes or --item-size).
  bool bytes_mode = false;
  // --item-size: every item is this many bytes. The simulator then counts
  // items (a byte capacity B holds exactly B / item_size of them), and byte
  // counters are derived from item counters.
  uint64_t item_size = 0;
  uint64_t dataset_size = 0;  // N
  uint64_t total_bytes = 0;   // bytes_mode: the dataset's size in bytes
  bool curve = false;         // print a curve even for one capacity
  bool json = false;
};

// Runs Simulate() and prints a table or, with request.json, one JSON object.
Status RunSimulation(const SimulateRequest& request);

}  // namespace opt4store

#endif  // OPT4STORE_TOOLS_SIMULATE_COMMAND_H_
