#!/usr/bin/env python3
"""GPU end-to-end training through opt4store (issue 5, part 5; issue 17).

The reference table's settings: timm models (resnet50, mobilenetv3_small_100,
vit_base_patch16_224), batch 16, 5 shuffled epochs, automatic mixed precision
(float16 autocast + GradScaler), cache ratio 0.3, num_workers 0 and 8.

Two settings (datasets), each a block of the results JSON:

  standard  bench/demo.py's decode-bound JPEG set: 512x512 files, decoded and
            resized to 3x256x256 uint8 on every access (256 px instead of 224
            so that the cached bytes are the decoded ones the demo caches).
            Top-level "settings", "results", "floor", "ratios".
  heavy     1024x1024 JPEGs, and more work per sample before the cache:
            decode, resize to 512, GaussianBlur(2), UnsharpMask, DETAIL,
            resize to 256 (PIL). The cached value is the same 3x256x256
            uint8, so the cache moves the same bytes; only the source is
            slower: tens of ms per sample, several times what 8 workers need
            to keep up with an H100 on resnet50. resnet50 and 8 workers by
            default. The block "heavy" (same keys).

Each setting's "settings" records decode_ms_per_sample: the median time of
dataset[i] over its first 32 items, in the main process (one core), before
the runs. Configurations: no_cache (the plain Dataset); lru_ram (policy=
"lru", RAM only, 30% of the decoded bytes); opt_disk_prefetch (policy="opt",
RAM 30% + the disk tier, default prefetch); each run with up to three
transfers: "copy" moves every batch of torch's DataLoader with a blocking
.to(device) from pageable memory (a loop without pin_memory); "to_device"
wraps that loader in opt4store.to_device (batches staged ahead through
reused pinned buffers, copied on a side stream while the model computes, on
a background thread where the pace rule puts them: "pace" counts the
batches staged there and the rule's trials); "loader" is
opt4store.DataLoader(device=...) (store configurations only), which
assembles hits natively and copies them the same way. "ratios" has each
configuration's total against no_cache with the same transfer (the loader's
against no_cache's copy), and to_device and loader against copy. --configs
and --transfers run a subset.

One training step: x.float()/255, normalised, forward under autocast, cross
entropy against synthetic labels (index % classes), backward through the
GradScaler, SGD with momentum. An epoch's time ends with a
torch.cuda.synchronize(), so it includes all the GPU work it queued; its
"wait_s" is the loop's time in next() (waiting for a batch, or loading it
with 0 workers and the copy): an epoch over the floor with little wait ran
its steps slower. Each model first runs warm-up steps (cuDNN's autotuning
and the allocator's growth are not charged to its first configuration).

The GPU floor ("floor", per model): the same training step on one fixed
batch already on the device (labels too), once for each batch of an epoch
(the last one partial as in the epoch): an epoch-equivalent with no loading
and no transfer, the fastest of 3 repeats after the warm-up. It is taken
again before each store configuration's run ("floor_s"), and each cached
epoch (2..E) is recorded as "epoch_vs_floor": its time / floor_s.

The paired part ("paired", per model and worker count; --paired ROUNDS,
default 3): the runs above lie a minute apart, while the step's cost moves
by up to 50% in that time. So one opt + disk + prefetch store is filled in
one epoch, then each round runs one cached epoch per transfer, each right
after one pass of the floor, and sets it against that pass and its round's
copy epoch, seconds apart (paired() says what a round records).

Every configuration compares the items it returns at 64 fixed indices with
a decode made before the runs, on the device and without synchronising
(DeviceChecker: the batch's indices travel with it and pick the references);
a mismatch makes the exit status 1.

Without CUDA the script writes {"skipped": reason} and exits 0 (keeping a
results file from a GPU machine if the --json path holds one), unless
--device cpu is given: then it runs the same harness on the CPU (no AMP),
which is how the harness itself is checked on machines without a GPU; such
numbers are not GPU results and the report says so. --models tiny (a small
conv net) stands in for timm where timm is not installed.

Usage: PYTHONPATH=<build>/python python3 bench/gpu_bench.py [--quick]
       [--settings standard,heavy | --heavy] [--models a,b] [--workers 0,8]
       [--images N] [--epochs E] [--paired ROUNDS] [--device cuda|cpu] [--dir DIR] [--json FILE]
--quick: 96 images, 2 epochs, 1 paired round, resnet50, workers 0, the
standard setting only (or --heavy). --models and --workers apply to every
setting run; without them the standard setting runs the three models with
0 and 8 workers, the heavy one resnet50 with 8.
A full run outlasts the GPU machine's 10 minutes a command: run it in
parts (one model, then --heavy) and join them with --merge.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import time

import torch
import torch.utils.data

import opt4store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo import OUT, WithIndex  # noqa: E402
from e2e_bench import image_set, reference_for  # noqa: E402
from gpu_results import (CONFIGS, TRANSFERS, merge, pace_counts, ratios,  # noqa: E402
                         skip_without_gpu)
from heavy_images import HEAVY_SIDE, HEAVY_WORK, heavy_image_set  # noqa: E402

BATCH = 16
RAM_RATIO = 0.3
SEED = 1
CLASSES = 1000
WARMUP_STEPS = 10
MODELS = ("resnet50", "mobilenetv3_small_100", "vit_base_patch16_224")
SETTINGS = ("standard", "heavy")
# The reference's seconds for 5 epochs of resnet50 (its table; its dataset).
REFERENCE_RESNET50 = {"no_cache": 84.2, "lru": 69.5, "opt": 42.7}
# The reference's published whole-run ratio, its OPT against no cache, per model.
PUBLISHED_OPT_VS_NO_CACHE = {"resnet50": 0.51, "mobilenetv3_small_100": 0.46,
                             "vit_base_patch16_224": 0.53}
FLOOR_REPEATS = 3
# The paired part's transfers beside the native loader's (paired()).
EXTRA_PAIRED = ["pinned", "inline", "thread"]
DECODE_TIMED = 32   # items whose dataset[i] time gives decode_ms_per_sample
STANDARD_WORK = "decode a 512x512 JPEG, resize to 256x256 (bilinear)"
STAT_KEYS = ("accesses", "hits_ram", "hits_disk", "source_loads", "prefetched", "drift",
             "expect_timeouts", "puts_dropped")  # the last two tell a double load's cause


def build_model(name, device):
    if name == "tiny":
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=4, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, CLASSES))
        return net.to(device)
    import timm  # only the GPU machine has it; imported where needed
    # img_size: ViT's patch embedding is built for a fixed input side.
    kwargs = {"img_size": OUT} if name.startswith("vit") else {}
    return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs).to(device)


class Trainer:
    """One AMP training step per batch (the model, optimiser and scaler
    persist across the configurations of one model, as in one long job)."""

    def __init__(self, model_name, device):
        self.device = torch.device(device)
        self.amp = self.device.type == "cuda"
        self.net = build_model(model_name, self.device)
        if self.amp:
            self.net = self.net.to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        # torch.amp.GradScaler from torch 2.3 on (torch.cuda.amp's is deprecated there).
        self.scaler = (torch.amp.GradScaler("cuda", enabled=self.amp)
                       if hasattr(torch.amp, "GradScaler") else
                       torch.cuda.amp.GradScaler(enabled=self.amp))
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=self.device).view(1, 3, 1, 1) * 255

    def __call__(self, x, idx):
        x = (x.float() - self.mean) / self.std
        if self.amp:
            x = x.contiguous(memory_format=torch.channels_last)
        y = idx.to(self.device, non_blocking=True) % CLASSES
        # No autocast at all on the CPU: torch 1.13's CPU autocast rejects float16.
        amp = torch.autocast("cuda", dtype=torch.float16) if self.amp else contextlib.nullcontext()
        with amp:
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()

    def warm_up(self, batch):
        x, idx = batch
        for _ in range(WARMUP_STEPS):
            self(x.to(self.device), idx)
        self.sync()

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def decode_ms(ds):
    """Median milliseconds of ds[i] over its first DECODE_TIMED items, in
    this process: the source's cost per sample on one core."""
    times = []
    for i in range(min(DECODE_TIMED, len(ds))):
        t0 = time.perf_counter()
        ds[i]
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def gpu_floor(trainer, batch, n, repeats=FLOOR_REPEATS):
    """The step's own cost: one epoch-equivalent (a step per batch of an
    epoch of n items, the last one partial as in the epoch) on one fixed
    batch already on the device. The fastest of repeats, in seconds, and the
    median step of all repeats in ms."""
    x, idx = (t.to(trainer.device) for t in batch)
    sizes = [BATCH] * (n // BATCH) + ([n % BATCH] if n % BATCH else [])
    times, steps = [], []
    for _ in range(repeats):
        trainer.sync()
        t0 = time.perf_counter()
        for size in sizes:
            s0 = time.perf_counter()
            trainer(x[:size], idx[:size])
            steps.append(time.perf_counter() - s0)
        trainer.sync()
        times.append(time.perf_counter() - t0)
    return {"epoch_s": min(times), "repeats_s": times, "steps": len(sizes),
            "step_ms": min(times) / len(sizes) * 1e3,
            "median_step_ms": statistics.median(steps) * 1e3}


def sm_clock_mhz(device):
    """The GPU's SM clock over its last sample period (torch 2.1+ with
    pynvml), or None: a launch-bound step's time follows it."""
    try:
        return int(torch.cuda.clock_rate(device))
    except Exception:  # noqa: B902  no pynvml, no such call, or no GPU
        return None


def store_options(name, decoded):
    ram = int(decoded * RAM_RATIO)
    return {"no_cache": None, "lru_ram": {"policy": "lru", "ram": ram, "disk": 0},
            "opt_disk_prefetch": {"policy": "opt", "ram": ram, "disk": decoded * 2}}[name]


class DeviceChecker:
    """Compares the returned items at the reference indices with their decode
    on the device, without waiting for the GPU: the batch's indices (moved to
    the device with the batch) pick each row's reference, and the mismatches
    add to a device-side count, read once per run. A check that synchronised
    on every batch would drain the GPU's queue and erase the overlap being
    measured."""

    def __init__(self, reference, n, device):
        keys = sorted(reference)
        self.reference = torch.stack([reference[i] for i in keys]).to(device)
        slots = torch.full((n,), -1, dtype=torch.int64)
        slots[keys] = torch.arange(len(keys))
        self.slots = slots.to(device)
        self.counted = torch.zeros(2, dtype=torch.int64, device=device)  # checked, wrong

    def __call__(self, x, idx):
        slot = self.slots[idx.to(self.slots.device, non_blocking=True)]
        checked = slot >= 0
        differs = (x != self.reference[slot.clamp(min=0)]).flatten(1).any(1)
        self.counted += torch.stack([checked.sum(), (differs & checked).sum()])

    @property
    def checked(self):
        return int(self.counted[0])

    @property
    def wrong(self):
        return int(self.counted[1])


def shuffled(ds):
    """The runs' shuffle: the same order in every configuration."""
    return torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(SEED))


def fresh_store(config, ds, store_dir):
    """A new store of config's options (None for no_cache), at store_dir,
    emptied first, when it has a disk tier."""
    options = store_options(config, len(ds) * 3 * OUT * OUT)
    if options is None:
        return None
    path = store_dir if options["disk"] else None
    if path:
        shutil.rmtree(path, ignore_errors=True)
    return opt4store.Store(path, **options)


def make_loader(config, transfer, ds, trainer, workers, epochs, store_dir):
    """(batches of (x, idx) for the training loop, the store or None)."""
    store = fresh_store(config, ds, store_dir)
    if store is None:
        data, sampler = WithIndex(ds), shuffled(ds)
    else:
        sampler = opt4store.PlannedSampler(shuffled(ds), epochs=epochs)
        if transfer == "loader":
            # The cached value is (sample, index), so that the native loader's
            # batches carry their indices as torch's do.
            data = opt4store.CachedDataset(WithIndex(ds), store, sampler)
            return opt4store.DataLoader(data, sampler=sampler, batch_size=BATCH,
                                        num_workers=workers, persistent_workers=workers > 0,
                                        device=trainer.device), store
        data = WithIndex(opt4store.CachedDataset(ds, store, sampler))
    loader = torch.utils.data.DataLoader(data, sampler=sampler, batch_size=BATCH,
                                         num_workers=workers, persistent_workers=workers > 0)
    return (opt4store.to_device(loader, trainer.device) if transfer == "to_device"
            else loader), store


def train_epoch(batches, transfer, trainer, checker):
    """One epoch of training steps over batches: (seconds, less the checks'
    time; seconds the loop spent in next(); the median step in ms, from a
    batch in hand to the step's return)."""
    t0 = time.perf_counter()
    checking = waited = 0.0
    steps = []
    it = iter(batches)
    while True:
        w0 = time.perf_counter()
        batch = next(it, None)
        s0 = time.perf_counter()
        waited += s0 - w0
        if batch is None:
            break
        x, idx = batch
        if transfer in ("copy", "pinned"):  # pinned: queued from pinned memory, in this thread
            x = x.to(trainer.device, non_blocking=transfer == "pinned")
        trainer(x, idx)
        c0 = time.perf_counter()
        steps.append(c0 - s0)
        checker(x, idx)
        checking += time.perf_counter() - c0
    trainer.sync()
    return time.perf_counter() - t0 - checking, waited, statistics.median(steps) * 1e3


def run(config, transfer, ds, trainer, reference, workers, epochs, store_dir):
    batches, store = make_loader(config, transfer, ds, trainer, workers, epochs, store_dir)
    checker = DeviceChecker(reference, len(ds), trainer.device)
    times, waits, per_epoch, previous = [], [], [], {}
    for _ in range(epochs):
        seconds, waited, _ = train_epoch(batches, transfer, trainer, checker)
        times.append(seconds)
        waits.append(waited)
        if store is not None:
            now = store.stats()
            per_epoch.append({k: now.get(k, 0) - previous.get(k, 0) for k in STAT_KEYS})
            previous = dict(now)
    pace = pace_counts(batches)
    del batches
    if store is not None:
        store.close()
        shutil.rmtree(store_dir, ignore_errors=True)
    return {"epoch_times": times, "wait_s": waits, "total": sum(times), "per_epoch": per_epoch,
            "checked": checker.checked, "wrong": checker.wrong, "pace": pace}


def paired(ds, trainer, reference, batch, workers, transfers, rounds, store_dir):
    """Cached epochs of each transfer and the GPU floor, interleaved over one
    warm opt + disk + prefetch store: after an epoch that fills it, round r
    runs one cached epoch with each transfer, in an order rotated by r, each
    right after one pass of the floor. Each epoch is set against that pass
    ("epoch_vs_floor"; one pass each, so the same estimator on both sides,
    not the fastest of several against one epoch) and against the copy epoch
    of its round ("vs_copy"), seconds apart, so the step's drift between
    runs made minutes apart cancels out. "step_vs_floor" sets the epoch's
    median step against the pass's: near 1 with an epoch ratio well above,
    the gap lies in a few slow steps. "sm_mhz" is the SM clock after the
    pass and after the epoch, where torch can read it. With the native
    loader three more transfers run here only, two with no thread: "pinned"
    (pin_memory=True, .to(device, non_blocking=True) in the loop) and
    "inline" (those batches through to_device(depth=0)), and "thread" (the
    same through to_device(pace=False): always the thread): against "loader"
    (the pace rule) they tell whether a thread helps a launch-bound step or
    costs it the GIL, and whether the rule chose the better place.
    All share the store, the sampler's plan (each loop takes the plan's next
    epoch) and the value, (sample, index), as the native loader needs."""
    transfers = list(transfers) + (EXTRA_PAIRED if "loader" in transfers else [])
    store = fresh_store("opt_disk_prefetch", ds, store_dir)
    sampler = opt4store.PlannedSampler(shuffled(ds), epochs=1 + rounds * len(transfers))
    data = opt4store.CachedDataset(WithIndex(ds), store, sampler)
    keywords = {"sampler": sampler, "batch_size": BATCH, "num_workers": workers,
                "persistent_workers": workers > 0}
    plain = torch.utils.data.DataLoader(data, **keywords)  # copy's and to_device's, workers too
    loaders = {"copy": plain, "to_device": opt4store.to_device(plain, trainer.device)}
    if "loader" in transfers:
        loaders["loader"] = opt4store.DataLoader(data, device=trainer.device, **keywords)
        loaders["pinned"] = opt4store.DataLoader(data, pin_memory=True, **keywords)
        loaders["inline"] = opt4store.to_device(loaders["pinned"], trainer.device, depth=0)
        loaders["thread"] = opt4store.to_device(loaders["pinned"], trainer.device, pace=False)
    checker = DeviceChecker(reference, len(ds), trainer.device)
    out = {"first_epoch_s": train_epoch(plain, "copy", trainer, checker)[0], "rounds": []}
    for r in range(rounds):
        k = r % len(transfers)
        row = {"order": transfers[k:] + transfers[:k], "floor_before_s": {}, "epoch_s": {},
               "wait_s": {}, "step_ms": {}, "floor_step_ms": {}, "sm_mhz": {}}
        for transfer in row["order"]:
            floor = gpu_floor(trainer, batch, len(ds), repeats=1)
            floor_mhz = sm_clock_mhz(trainer.device)
            row["floor_before_s"][transfer] = floor["epoch_s"]
            row["floor_step_ms"][transfer] = floor["median_step_ms"]
            (row["epoch_s"][transfer], row["wait_s"][transfer],
             row["step_ms"][transfer]) = train_epoch(loaders[transfer], transfer, trainer, checker)
            row["sm_mhz"][transfer] = [floor_mhz, sm_clock_mhz(trainer.device)]
        row["floor_s"] = row["floor_before_s"][row["order"][0]]
        out["rounds"].append(row)
    out["pace"] = {t: pace_counts(loaders[t]) for t in transfers}
    del loaders, plain
    out["stats"] = {k: v for k, v in store.stats().items() if k in STAT_KEYS}
    store.close()
    shutil.rmtree(store_dir, ignore_errors=True)
    rows = out["rounds"]
    out["epoch_vs_floor"] = {t: [r["epoch_s"][t] / r["floor_before_s"][t] for r in rows]
                             for t in transfers}
    out["step_vs_floor"] = {t: [r["step_ms"][t] / r["floor_step_ms"][t] for r in rows]
                            for t in transfers}
    if "copy" in transfers:
        out["vs_copy"] = {t: [r["epoch_s"][t] / r["epoch_s"]["copy"] for r in rows]
                          for t in transfers if t != "copy"}
    out.update(source_loads=out["stats"]["source_loads"], images=len(ds), wrong=checker.wrong,
               checked=checker.checked)
    return out


def machine(device):
    out = {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "load": list(os.getloadavg()), "torch": torch.__version__,
           "python": platform.python_version(), "device": str(device)}
    if torch.device(device).type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
        out["cuda"] = torch.version.cuda
    try:
        import timm
        out["timm"] = timm.__version__
    except ImportError:
        pass
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--settings", default=None,
                        help="comma-separated, of standard,heavy (default both; --quick: standard)")
    parser.add_argument("--heavy", action="store_true", help="the heavy setting only")
    parser.add_argument("--models", default=None, help="comma-separated timm names, or tiny")
    parser.add_argument("--workers", default=None,
                        help="comma-separated (default: standard 0,8, heavy 8)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of {','.join(CONFIGS)}")
    parser.add_argument("--transfers", default=",".join(TRANSFERS),
                        help=f"comma-separated, of {','.join(TRANSFERS)}")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--paired", type=int, default=None, metavar="ROUNDS",
                        help="rounds of the paired part (default 3; --quick 1; 0: none)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dir", default="/var/tmp/opt4store-gpu")
    parser.add_argument("--json", default=None)
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="join the results of several runs (one model each, say) "
                             "into --json; runs nothing")
    parser.add_argument("--note", default=None,
                        help="with --merge: how the runs were made, for the report")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.json or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "results", "gpu_bench.json"), args.note)

    here = os.path.dirname(os.path.abspath(__file__))
    json_path = args.json or os.path.join(
        here, "results", "tmp" if args.quick else "", "gpu_bench.json")
    os.makedirs(os.path.dirname(json_path), exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return skip_without_gpu(json_path, machine("cpu"))

    names = (["heavy"] if args.heavy else args.settings.split(",") if args.settings else
             ["standard"] if args.quick else list(SETTINGS))
    if not names or any(name not in SETTINGS for name in names):
        parser.error(f"--settings: each of {', '.join(SETTINGS)}")
    configs, transfers = args.configs.split(","), args.transfers.split(",")
    if any(c not in CONFIGS for c in configs) or any(t not in TRANSFERS for t in transfers):
        parser.error(f"--configs: each of {', '.join(CONFIGS)}; "
                     f"--transfers: each of {', '.join(TRANSFERS)}")
    n = args.images or (96 if args.quick else 1000)
    epochs = args.epochs or (2 if args.quick else 5)
    rounds = args.paired if args.paired is not None else 1 if args.quick else 3
    if rounds < 0:
        parser.error("--paired: 0 or more rounds")
    store_dir = os.path.join(args.dir, "store")
    setups = {}
    for name in names:
        ds = image_set(args.dir, n) if name == "standard" else heavy_image_set(args.dir, n)
        models = MODELS if name == "standard" else MODELS[:1]
        setups[name] = {
            "ds": ds, "reference": reference_for(ds, n),
            "models": (args.models.split(",") if args.models else
                       list(models[:1] if args.quick else models)),
            "workers": ([int(w) for w in args.workers.split(",")] if args.workers else
                        [0] if args.quick else [0, 8] if name == "standard" else [8]),
            "decode_ms": decode_ms(ds)}
        print(f"{name}: dataset[i] takes {setups[name]['decode_ms']:.1f} ms a sample "
              f"(median of {min(DECODE_TIMED, n)}, one core)", flush=True)

    def setting(name):
        s = setups.get(name, {})
        return {"name": name, "mode": "quick" if args.quick else "full", "images": n,
                "jpeg_side": 512 if name == "standard" else HEAVY_SIDE,
                "work": STANDARD_WORK if name == "standard" else HEAVY_WORK,
                "decode_ms_per_sample": s.get("decode_ms"),
                "decode_timed_items": min(DECODE_TIMED, n),
                "sample_shape": [3, OUT, OUT], "decoded_bytes": n * 3 * OUT * OUT,
                "ram_ratio": RAM_RATIO, "epochs": epochs, "batch": BATCH,
                "workers": s.get("workers", []), "models": s.get("models", []),
                "configs": configs, "transfers": transfers, "amp": device.type == "cuda",
                "warmup_steps": WARMUP_STEPS, "floor_repeats": FLOOR_REPEATS,
                "paired_rounds": rounds if "opt_disk_prefetch" in configs else 0,
                "checked_indices": len(s["reference"]) if s else 0,
                "reference_resnet50_seconds": REFERENCE_RESNET50,
                "published_opt_vs_no_cache": PUBLISHED_OPT_VS_NO_CACHE}

    started = time.perf_counter()
    results = {name: {} for name in names}
    floors = {name: {} for name in names}
    pairs = {name: {} for name in names}
    wrong = 0
    for model in dict.fromkeys(m for name in names for m in setups[name]["models"]):
        trainer = Trainer(model, device)
        ds = next(setups[name]["ds"] for name in names if model in setups[name]["models"])
        batch = (torch.stack([ds[i % len(ds)] for i in range(BATCH)]), torch.arange(BATCH))
        trainer.warm_up(batch)
        floor = gpu_floor(trainer, batch, n)
        print(f"{model:24s} GPU floor {floor['epoch_s']:.3f} s an epoch-equivalent "
              f"({floor['steps']} steps of {floor['step_ms']:.2f} ms)", flush=True)
        for name in names:
            setup = setups[name]
            if model not in setup["models"]:
                continue
            floors[name][model] = floor
            results[name][model] = {}
            for workers in setup["workers"]:
                runs = {}
                for config in configs:
                    for transfer in transfers:
                        if config == "no_cache" and transfer == "loader":
                            continue  # opt4store.DataLoader loads a CachedDataset
                        # The step's cost drifts (resnet50: 16 to 25 ms within minutes on
                        # one H200): a cached run is set against a floor taken just before.
                        floor_s = (gpu_floor(trainer, batch, n)["epoch_s"]
                                   if config != "no_cache" else None)
                        r = run(config, transfer, setup["ds"], trainer, setup["reference"],
                                workers, epochs, store_dir)
                        if floor_s:
                            r["floor_s"] = floor_s
                            r["epoch_vs_floor"] = [t / floor_s for t in r["epoch_times"][1:]]
                        runs[f"{config}/{transfer}"] = r
                        wrong += r["wrong"]
                        print(f"{name:8s} {model:24s} workers={workers} {config:18s} "
                              f"{transfer:9s} total {r['total']:8.3f} s  epochs "
                              + " ".join(f"{t:.3f}" for t in r["epoch_times"])
                              + ("  vs floor " + " ".join(f"{v:.2f}" for v in r["epoch_vs_floor"])
                                 if "epoch_vs_floor" in r else "")
                              + "  waited " + " ".join(f"{t:.3f}" for t in r["wait_s"])
                              + f"  pace {r['pace']}"
                              + f"  checked {r['checked']} wrong {r['wrong']}", flush=True)
                results[name][model][str(workers)] = runs
                if rounds and "opt_disk_prefetch" in configs:
                    p = paired(setup["ds"], trainer, setup["reference"], batch, workers,
                               transfers, rounds, store_dir)
                    pairs[name].setdefault(model, {})[str(workers)] = p
                    wrong += p["wrong"]
                    for k, row in enumerate(p["rounds"]):
                        print(f"{name:8s} {model:24s} workers={workers} paired round {k + 1}: "
                              f"floor {row['floor_s']:.3f} s, "
                              + ", ".join(f"{t} {row['epoch_s'][t]:.3f} s"
                                          f" (waited {row['wait_s'][t]:.3f})"
                                          for t in row["order"]), flush=True)
                    print(f"{name:8s} {model:24s} workers={workers} paired: source loads "
                          f"{p['source_loads']} of {n}; pace {p['pace']}; "
                          f"checked {p['checked']} "
                          f"wrong {p['wrong']}", flush=True)
        del trainer

    def block(name):
        return {"settings": setting(name), "results": results.get(name, {}),
                "floor": floors.get(name, {}), "paired": pairs.get(name, {}),
                "ratios": ratios(results.get(name, {}))}

    out = {"machine": machine(device), **block("standard")}
    if "heavy" in names:
        out["heavy"] = block("heavy")
    out.update(wrong=wrong, took_s=time.perf_counter() - started)
    for name in names:
        for key, r in block(name)["ratios"].items():
            for ratio, value in r.items():
                print(f"{name:8s} {key:32s} {ratio:40s} {value:.3f}")
    with open(json_path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {json_path}; {wrong} wrong samples; {out['took_s']:.0f} s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
