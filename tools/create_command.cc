// opt4store create: makes a new, empty store directory and writes its
// manifest (dataset size, budgets, policy, plan, disk behaviour), so that a
// training job, `import` and the other admin commands find it.
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "commands.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "store_admin.h"

namespace opt4store {

namespace {

struct CreateCommandOptions {
  std::string path;
  PlanOptions plan;
  std::string ram;
  std::string ram_items;
  std::string disk;
  std::string policy;
  std::string compression;
  std::string sync;
  std::string prefetch_depth;
};

// The options that only mean something with a plan.
Status CheckNoPlanOnlyOptions(const PlanOptions& p) {
  const std::pair<const char*, bool> plan_only[] = {
      {"--epochs", !p.epochs.empty()},
      {"--seed", !p.seed.empty()},
      {"--num-samples", !p.num_samples.empty()},
      {"--world", !p.world_size.empty()},
      {"--rank", !p.rank.empty()},
      {"--drop-last", p.drop_last},
      {"--epoch-length", !p.epoch_length.empty()},
  };
  for (const auto& [flag, given] : plan_only) {
    if (given) {
      return Status::InvalidArgument(std::string(flag) +
                                     " describes a plan: give --sampler KIND or --plan FILE too");
    }
  }
  return Status::OK();
}

Status BuildStoreOptions(const CreateCommandOptions& o, StoreOptions* so) {
  if (HasPlan(o.plan)) {
    PlanSpec spec;
    OPT4STORE_RETURN_IF_ERROR(BuildPlanSpec(o.plan, &spec));
    // The manifest keeps the plan file's path for later opens, which may
    // run from another directory.
    if (spec.kind == SamplerKind::kFile) {
      std::error_code ec;
      const std::filesystem::path absolute = std::filesystem::absolute(spec.path, ec);
      if (!ec) spec.path = absolute.lexically_normal().string();
    }
    // A plan file without --dataset-size leaves N to the plan (max id + 1).
    if (spec.dataset_size != 0) so->dataset_size = spec.dataset_size;
    so->plan = spec;
  } else {
    OPT4STORE_RETURN_IF_ERROR(CheckNoPlanOnlyOptions(o.plan));
    if (o.plan.dataset_size.empty()) {
      return Status::InvalidArgument(
          "give --dataset-size N (ids are [0, N)), or a plan: "
          "--plan FILE or --sampler KIND --dataset-size N");
    }
    uint64_t n = 0;
    OPT4STORE_RETURN_IF_ERROR(ParseUint(o.plan.dataset_size, &n).WithContext("--dataset-size"));
    if (n == 0) return Status::InvalidArgument("--dataset-size: must be at least 1");
    if (n > kMaxDatasetSize) {
      return Status::InvalidArgument("--dataset-size: " + o.plan.dataset_size +
                                     " is above the maximum of " + std::to_string(kMaxDatasetSize) +
                                     " items");
    }
    so->dataset_size = n;
  }

  if (!o.ram.empty() && !o.ram_items.empty()) {
    return Status::InvalidArgument("give --ram SIZE or --ram-items N, not both");
  }
  uint64_t value = 0;
  if (!o.ram.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseSize(o.ram, &value).WithContext("--ram"));
    so->ram_bytes = value;
  }
  if (!o.ram_items.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseUint(o.ram_items, &value).WithContext("--ram-items"));
    so->ram_items = value;
  }
  // Without a disk tier nothing is written under STORE: there would be no
  // store to create.
  if (o.disk.empty()) {
    return Status::InvalidArgument("give --disk SIZE: the disk tier's budget (e.g. 64GiB)");
  }
  OPT4STORE_RETURN_IF_ERROR(ParseSize(o.disk, &value).WithContext("--disk"));
  if (value == 0) {
    return Status::InvalidArgument(
        "--disk: must be more than 0 bytes (a store without a disk "
        "tier keeps nothing on disk)");
  }
  so->disk_bytes = value;

  if (!o.policy.empty()) {
    PolicyKind kind;
    OPT4STORE_RETURN_IF_ERROR(ParsePolicyKind(o.policy, &kind).WithContext("--policy"));
    so->policy = kind;
  }
  if (!o.compression.empty()) {
    StoreOptions::Compression compression;
    OPT4STORE_RETURN_IF_ERROR(
        ParseCompression(o.compression, &compression).WithContext("--compression"));
    so->compression = compression;
  }
  if (!o.sync.empty()) {
    StoreOptions::SyncMode sync;
    OPT4STORE_RETURN_IF_ERROR(ParseSyncMode(o.sync, &sync).WithContext("--sync"));
    so->sync = sync;
  }
  if (!o.prefetch_depth.empty()) {
    OPT4STORE_RETURN_IF_ERROR(ParseUint(o.prefetch_depth, &value).WithContext("--prefetch-depth"));
    so->prefetch_depth = value;
  }
  so->create_if_missing = true;
  so->error_if_exists = true;
  so->disk_only = true;
  so->info_log = LogStoreWarning;
  return Status::OK();
}

// Refuses a path that holds anything: an existing store, or files that a
// store would mix with. *existed: the path is an (empty) directory already.
Status CheckNewPath(const std::string& path, bool* existed) {
  *existed = false;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::FromErrno(path, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("cannot create a store at " + path +
                                   ": it exists and is not a directory");
  }
  std::error_code ec;
  if (std::filesystem::exists(path + "/index", ec) || std::filesystem::exists(path + "/LOCK", ec)) {
    return Status::InvalidArgument("a store already exists at " + path +
                                   " (remove it first, or choose another path)");
  }
  if (!std::filesystem::is_empty(path, ec) && !ec) {
    return Status::InvalidArgument("cannot create a store at " + path +
                                   ": the directory is not empty");
  }
  *existed = true;
  return Status::OK();
}

// Store::Open checks some options only after it has made the directory;
// a failed create must not leave a half-made store that the next create
// refuses. The path was empty or absent before, so all of it is ours.
void RemoveFailedStore(const std::string& path, bool existed) {
  std::error_code ec;
  if (!existed) {
    std::filesystem::remove_all(path, ec);
    return;
  }
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    std::error_code remove_ec;
    std::filesystem::remove_all(entry.path(), remove_ec);
  }
}

Status RunCreate(const CreateCommandOptions& o) {
  StoreOptions so;
  OPT4STORE_RETURN_IF_ERROR(BuildStoreOptions(o, &so));
  bool existed = false;
  OPT4STORE_RETURN_IF_ERROR(CheckNewPath(o.path, &existed));

  std::unique_ptr<Store> store;
  Status s = Store::Open(so, o.path, &store);
  if (!s.ok()) {
    // Busy or "already exists": another create got there first; its
    // files are not ours to remove.
    if (!s.IsBusy() && s.message().find("already exists") == std::string::npos) {
      RemoveFailedStore(o.path, existed);
    }
    if (s.message().find(o.path) == std::string::npos) s = s.WithContext(o.path);
    return s.WithContext("cannot create the store");
  }
  StoreInfo info;
  Status inspected = store->Inspect(&info);
  OPT4STORE_RETURN_IF_ERROR(CloseStore(o.path, &store));
  OPT4STORE_RETURN_IF_ERROR(inspected);

  std::string line =
      "created store " + o.path + ": " + std::to_string(info.dataset_size) + " items, RAM " +
      (info.ram_bytes ? FormatSize(info.ram_bytes) : std::to_string(info.ram_items) + " items") +
      ", disk " + FormatSize(info.disk_bytes) + ", policy " + info.policy + ", plan " +
      (info.plan.empty() ? "none" : info.plan) + ", compression " + info.compression + ", sync " +
      info.sync + "\n";
  return WriteStdout(line);
}

}  // namespace

Command AddCreateCommand(CLI::App* parent) {
  auto options = std::make_shared<CreateCommandOptions>();
  CLI::App* app = parent->add_subcommand(
      "create",
      "Create a new store directory and write its manifest.\n"
      "  opt4store create /data/cache --dataset-size 50000 --ram 8GiB --disk 200GiB\n"
      "  opt4store create /data/cache --sampler shuffle --dataset-size 50000 --epochs 90 "
      "--ram 8GiB --disk 200GiB");
  AddStoreArgument(app, &options->path);
  AddPlanOptions(app, "--plan", &options->plan);
  const char* kBudgets = "Budgets";
  app->add_option("--ram", options->ram,
                  "RAM tier capacity in bytes of item data (512MiB, 8GiB, ...; default 1GiB)")
      ->type_name("SIZE")
      ->group(kBudgets);
  app->add_option("--ram-items", options->ram_items, "RAM tier capacity in items instead of bytes")
      ->type_name("N")
      ->group(kBudgets);
  app->add_option("--disk", options->disk, "Disk tier budget (required; e.g. 200GiB)")
      ->type_name("SIZE")
      ->group(kBudgets);
  app->add_option("--policy", options->policy,
                  "RAM eviction policy: opt, opt-size, lru, lfu, fifo, random, static, none "
                  "(default opt)")
      ->type_name("NAME");
  app->add_option("--compression", options->compression,
                  "auto (LZ4 where it saves >= 10%) or none (default auto)")
      ->type_name("MODE");
  app->add_option("--sync", options->sync,
                  "When disk writes become durable: none, flush or every (default flush)")
      ->type_name("MODE");
  app->add_option("--prefetch-depth", options->prefetch_depth,
                  "Positions the planner runs ahead of the readers (default 512)")
      ->type_name("N");
  return Command{app, [options] { return RunCreate(*options); }};
}

}  // namespace opt4store
