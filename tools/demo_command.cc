// opt4store demo: the hit-rate curve of the reference project's setup, until
// the store itself exists. It is `simulate` with fixed options.
#include <cmath>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/status.h"
#include "simulate_command.h"

namespace opt4store {

namespace {

// The reference setup: 10 000 items, 10 epochs of sampling with replacement.
constexpr uint64_t kDemoItems = 10000;
constexpr uint64_t kDemoEpochs = 10;
constexpr uint64_t kDemoSeed = 0;

Status RunDemo() {
  SimulateRequest request;
  PlanSpec& plan = request.options.plan;
  plan.kind = SamplerKind::kReplacement;
  plan.dataset_size = kDemoItems;
  plan.epochs = kDemoEpochs;
  plan.seed = kDemoSeed;
  request.options.policies = AllPolicies();
  for (int k = 1; k <= 9; ++k) {
    const uint64_t items = static_cast<uint64_t>(std::llround(k / 10.0 * kDemoItems));
    request.capacities.push_back(items);
    request.options.capacities.push_back(items);
  }
  request.dataset_size = kDemoItems;
  request.curve = true;

  OPT4STORE_RETURN_IF_ERROR(WriteStdout(
      "opt4store demo: the hit rate of each eviction policy as the cache grows.\n"
      "A training job reads 10 000 samples for 10 epochs, sampling with replacement\n"
      "(seed 0), through a cache that holds 10% to 90% of the dataset. The sampler's\n"
      "order is known in advance, so opt (Belady's MIN) evicts the sample read\n"
      "furthest in the future: it should dominate every other policy at every size.\n"
      "static is the fill-once baseline (admit until full, never evict); none keeps\n"
      "nothing. Try your own plan with 'opt4store simulate --help'.\n\n"));
  return RunSimulation(request);
}

}  // namespace

Command AddDemoCommand(CLI::App* parent) {
  CLI::App* app = parent->add_subcommand(
      "demo",
      "Show the hit-rate curve of every policy on a reference setup (10 000 items, 10 "
      "epochs, sampling with replacement)");
  return Command{app, [] { return RunDemo(); }};
}

}  // namespace opt4store
