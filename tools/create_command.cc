// opt4store create: makes a new, empty store directory and writes its
// manifest (dataset size, budgets, policy, plan, disk behaviour), so that a
// training job, `import` and the other admin commands find it.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
  // Each setting given on the command line, by its name (ram, disk, ...).
  std::map<std::string, std::string> settings;
  std::optional<std::string> fingerprint;
};

std::string FlagOf(const char* setting) {
  std::string flag = std::string("--") + setting;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

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
    // The store keeps a copy of the plan file (Store::Open makes it); the
    // absolute path names the original in messages.
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
    OPT4STORE_RETURN_IF_ERROR(ParseCount(o.plan.dataset_size, &n).WithContext("--dataset-size"));
    if (n == 0) return Status::InvalidArgument("--dataset-size: must be at least 1");
    if (n > kMaxDatasetSize) {
      return Status::InvalidArgument("--dataset-size: " + o.plan.dataset_size +
                                     " is above the maximum of " + std::to_string(kMaxDatasetSize) +
                                     " items");
    }
    so->dataset_size = n;
  }

  for (const auto& [name, text] : o.settings) {
    OPT4STORE_RETURN_IF_ERROR(SetOption(name, text, so).WithContext(FlagOf(name.c_str())));
  }
  if (so->ram && so->ram_items) {
    return Status::InvalidArgument("give --ram SIZE or --ram-items N, not both");
  }
  // The manifest would keep it, and every open of the store would fail on it.
  if ((so->ram && *so->ram == 0) || (so->ram_items && *so->ram_items == 0)) {
    return Status::InvalidArgument(std::string(so->ram ? "--ram" : "--ram-items") +
                                   ": must be more than 0 (a store's RAM tier holds what it "
                                   "serves)");
  }
  // Without a disk tier nothing is written under STORE: there would be no
  // store to create.
  if (!so->disk) {
    return Status::InvalidArgument("give --disk SIZE: the disk tier's budget (e.g. 64GiB)");
  }
  if (*so->disk == 0) {
    return Status::InvalidArgument(
        "--disk: must be more than 0 bytes (a store without a disk "
        "tier keeps nothing on disk)");
  }
  if (*so->disk < kMinDiskBytes) {
    return Status::InvalidArgument("--disk: " + std::to_string(*so->disk) +
                                   " bytes is below the smallest disk tier, " +
                                   std::to_string(kMinDiskBytes / 1024) + " KiB");
  }
  so->fingerprint = o.fingerprint;
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
      "created store " + o.path + ": " + std::to_string(info.settings.dataset_size) + " items, RAM " +
      (info.settings.ram ? FormatSize(info.settings.ram)
                         : std::to_string(info.settings.ram_items) + " items") +
      ", disk " + FormatSize(info.settings.disk) + ", policy " + PolicyName(info.settings.policy) +
      ", plan " + (info.plan.empty() ? "none" : info.plan) +
      (info.settings.fingerprint.empty() ? "" : ", fingerprint '" + info.settings.fingerprint + "'") +
      ", compression " +
      CompressionName(info.settings.compression) + ", sync " + SyncModeName(info.settings.sync) +
      "\n";
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
  app->add_option_function<std::string>(
         "--fingerprint",
         [options](const std::string& text) { options->fingerprint = text; },
         "What the values will be made by (a dataset version, a transform): a later open "
         "that gives another gets a stale-store error")
      ->type_name("TEXT");
  for (const SettingField& field : SettingFields()) {
    const char* type_name = field.kind == SettingKind::kBytes   ? "SIZE"
                            : field.kind == SettingKind::kCount ? "N"
                                                                : "NAME";
    // What create writes is the disk tier, so it needs a budget.
    const std::string help =
        std::string(field.help) + (std::string_view(field.name) == "disk"
                                       ? " (required here, e.g. 200GiB)"
                                       : std::string(" (default ") + field.default_text + ")");
    app->add_option_function<std::string>(
           FlagOf(field.name),
           [options, name = std::string(field.name)](const std::string& text) {
             options->settings[name] = text;
           },
           help)
        ->type_name(type_name)
        ->group("Settings (saved with the store; a later open may change them)");
  }
  return Command{app, [options] { return RunCreate(*options); }};
}

}  // namespace opt4store
