// opt4store simulate --hosts: its JSON equals SimulateCluster() on the same
// plan, the table names every placement, and misuse is one line on stderr.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cli_test_util.h"
#include "json_test_util.h"
#include "opt4store/cluster_simulator.h"

namespace opt4store {
namespace {

using opt4store_test::CliResult;

// Runs the CLI in a scratch directory of its own (its stderr goes there).
CliResult RunCli(const std::vector<std::string>& args) {
  const opt4store_test::TempDir dir;
  return opt4store_test::Cli(dir, args);
}

TEST_CASE("simulate --hosts --json equals SimulateCluster", "[cli][cluster]") {
  const CliResult r = RunCli({"simulate", "--hosts", "3", "--ranks-per-host", "2", "--sampler",
                              "distributed", "--dataset-size", "500", "--epochs", "4", "--seed",
                              "5", "--capacity-ratio", "0.125", "--item-size", "1KiB", "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const opt4store_test::Json j = opt4store_test::ParseJson(r.out);

  ClusterSimulationOptions o;
  o.plan.kind = SamplerKind::kDistributed;
  o.plan.dataset_size = 500;
  o.plan.epochs = 4;
  o.plan.seed = 5;
  o.plan.world_size = 6;
  o.hosts = 3;
  o.ranks_per_host = 2;
  o.capacity = 62;  // 0.125 of 500 KiB = 64000 bytes: 62 whole items
  REQUIRE(ParseClusterPlacementList("all", &o.placements).ok());
  ClusterSimulationResult want;
  REQUIRE(SimulateCluster(o, &want).ok());

  CHECK(j["hosts"].get<uint64_t>() == 3);
  CHECK(j["ranks_per_host"].get<uint64_t>() == 2);
  CHECK(j["capacity"].get<uint64_t>() == 62);
  CHECK(j["accesses"].get<uint64_t>() == want.shape.total_reads);
  CHECK(j["placements"].size() == 5);
  for (const ClusterPlacementResult& p : want.placements) {
    INFO(ClusterPlacementName(p.placement));
    const auto& got = j["placements"][ClusterPlacementName(p.placement)];
    CHECK(got["source_loads"].get<uint64_t>() == p.total.source_loads);
    CHECK(got["peer_fetches"].get<uint64_t>() == p.total.peer_fetches);
    CHECK(got["local_hits"].get<uint64_t>() == p.total.local_hits);
    CHECK(got["network_bytes"].get<uint64_t>() == p.total.transfers() * 1024);
    uint64_t loads = 0;
    for (const auto& v : got["per_epoch"]["source_loads"]) loads += v.get<uint64_t>();
    CHECK(loads == p.total.source_loads);
    CHECK(got["per_epoch"]["source_loads"].size() == 4);
  }
  // Deterministic: the same command prints the same bytes.
  CHECK(RunCli({"simulate", "--hosts", "3", "--ranks-per-host", "2", "--sampler", "distributed",
                "--dataset-size", "500", "--epochs", "4", "--seed", "5", "--capacity-ratio",
                "0.125", "--item-size", "1KiB", "--json"})
            .out == r.out);
}

TEST_CASE("simulate --hosts prints a table with every placement", "[cli][cluster]") {
  const CliResult r = RunCli({"simulate", "--hosts", "4", "--sampler", "distributed",
                              "--dataset-size", "1000", "--epochs", "3", "--capacity", "250",
                              "--placement", "per-host-opt,cluster-opt"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("per-host-opt") != std::string::npos);
  CHECK(r.out.find("cluster-opt") != std::string::npos);
  CHECK(r.out.find("home-opt") == std::string::npos);
  CHECK(r.out.find("4 hosts") != std::string::npos);
}

TEST_CASE("simulate --hosts refuses misuse in one line", "[cli][cluster]") {
  const std::vector<std::vector<std::string>> bad = {
      {"--hosts", "4", "--sampler", "shuffle", "--dataset-size", "100", "--capacity", "10"},
      {"--hosts", "4", "--sampler", "distributed", "--dataset-size", "100", "--world", "3",
       "--capacity", "10"},
      {"--hosts", "4", "--sampler", "distributed", "--dataset-size", "100", "--rank", "1",
       "--capacity", "10"},
      {"--hosts", "4", "--sampler", "distributed", "--dataset-size", "100", "--capacity",
       "10,20"},
      {"--hosts", "4", "--sampler", "distributed", "--dataset-size", "100", "--capacity", "101"},
      {"--hosts", "4", "--sampler", "distributed", "--dataset-size", "100", "--capacity", "10",
       "--placement", "lru"},
      {"--hosts", "0", "--sampler", "distributed", "--dataset-size", "100", "--capacity", "10"},
      {"--placement", "cluster-opt", "--sampler", "distributed", "--dataset-size", "100",
       "--capacity", "10"},
      {"--hosts", "4", "--sampler", "distributed", "--dataset-size", "100", "--capacity", "10",
       "--policy", "lru"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> full = {"simulate"};
    full.insert(full.end(), args.begin(), args.end());
    const CliResult r = RunCli(full);
    INFO(r.err);
    CHECK(r.status > 0);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("opt4store: error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

}  // namespace
}  // namespace opt4store
