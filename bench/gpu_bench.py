#!/usr/bin/env python3
"""GPU end-to-end training through opt4store (issue 5, part 5).

The reference table's settings: timm models (resnet50, mobilenetv3_small_100,
vit_base_patch16_224), batch 16, 5 shuffled epochs, automatic mixed precision
(float16 autocast + GradScaler), cache ratio 0.3, num_workers 0 and 8. The
dataset is bench/demo.py's decode-bound JPEG set (512x512 files, decoded and
resized to 3x256x256 uint8 on every access; 256 px instead of 224 so that
the cached bytes are the decoded ones the demo caches). Configurations:

  no_cache           the plain Dataset
  lru_ram            policy="lru", RAM only, 30% of the decoded bytes
  opt_disk_prefetch  policy="opt", RAM 30% + the disk tier, default prefetch

each run twice: "copy" moves every batch with a blocking .to(device) from
pageable memory (what a training loop without pin_memory does), and
"to_device" wraps the loader in opt4store.to_device (batch k+1 pinned and
copied on a side stream while the model computes on batch k).

One training step: x.float()/255, normalised, forward under autocast, cross
entropy against synthetic labels (index % classes), backward through the
GradScaler, SGD with momentum. An epoch's time ends with a
torch.cuda.synchronize(), so it includes all the GPU work it queued. Before
the timed runs each model does warm-up steps (cuDNN autotuning and the
allocator's first growth are not charged to the first configuration).

Every configuration compares the items it returns at 64 fixed indices with
a decode made before the runs, on the device and without synchronising
(DeviceChecker); a mismatch makes the exit status 1.

Without CUDA the script writes {"skipped": reason} and exits 0 (keeping a
results file from a GPU machine if the --json path holds one), unless
--device cpu is given: then it runs the same harness on the CPU (no AMP),
which is how the harness itself is checked on machines without a GPU; such
numbers are not GPU results and the report says so. --model tiny (a small
conv net) stands in for timm where timm is not installed.

Usage: PYTHONPATH=<build>/python python3 bench/gpu_bench.py
       [--quick] [--models a,b] [--workers 0,8] [--images N] [--epochs E]
       [--device cuda|cpu] [--dir DIR] [--json FILE]
--quick: 96 images, 2 epochs, the first model only, workers 0 only.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import sys
import time

import torch
import torch.utils.data

import opt4store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo import OUT, WithIndex  # noqa: E402
from e2e_bench import image_set, reference_for  # noqa: E402

BATCH = 16
RAM_RATIO = 0.3
SEED = 1
CLASSES = 1000
WARMUP_STEPS = 10
MODELS = ("resnet50", "mobilenetv3_small_100", "vit_base_patch16_224")
CONFIGS = ("no_cache", "lru_ram", "opt_disk_prefetch")
TRANSFERS = ("copy", "to_device")
# The reference's seconds for 5 epochs of resnet50 (its table; its dataset).
REFERENCE_RESNET50 = {"no_cache": 84.2, "lru": 69.5, "opt": 42.7}
STAT_KEYS = ("accesses", "hits_ram", "hits_disk", "source_loads", "prefetched", "drift")


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


def store_options(name, decoded):
    ram = int(decoded * RAM_RATIO)
    return {
        "no_cache": None,
        "lru_ram": {"policy": "lru", "ram": ram, "disk": 0},
        "opt_disk_prefetch": {"policy": "opt", "ram": ram, "disk": decoded * 2},
    }[name]


class DeviceChecker:
    """Compares the returned items at the reference indices with their decode
    on the device, without waiting for the GPU: each comparison adds to a
    device-side count, read once per run. A check that synchronised on every
    batch would drain the GPU's queue and erase the overlap being measured.
    The indices come as a host list (IndexedBatches), so no copy back either."""

    def __init__(self, reference, device):
        self.reference = {i: t.to(device) for i, t in reference.items()}
        self.checked = 0
        self.mismatches = torch.zeros((), dtype=torch.int64, device=device)

    def __call__(self, x, indices):
        for k, i in enumerate(indices):
            ref = self.reference.get(i)
            if ref is not None:
                self.checked += 1
                self.mismatches += (x[k] != ref).any()

    @property
    def wrong(self):
        return int(self.mismatches)


class IndexedBatches:
    """(x, idx, idx as a list of ints) per batch: to_device moves the tensors
    and leaves the list on the host."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for x, idx in self.loader:
            yield x, idx, idx.tolist()


def run(config, transfer, ds, trainer, reference, workers, epochs, store_dir):
    decoded = len(ds) * 3 * OUT * OUT
    options = store_options(config, decoded)
    shuffle = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(SEED))
    store = None
    if options is None:
        data, sampler = ds, shuffle
    else:
        path = store_dir if options["disk"] else None
        if path:
            shutil.rmtree(path, ignore_errors=True)
        store = opt4store.Store(path, **options)
        sampler = opt4store.PlannedSampler(shuffle, epochs=epochs)
        data = opt4store.CachedDataset(ds, store, sampler)
    loader = torch.utils.data.DataLoader(WithIndex(data), sampler=sampler, batch_size=BATCH,
                                         num_workers=workers, persistent_workers=workers > 0)
    batches = IndexedBatches(loader)
    if transfer == "to_device":
        batches = opt4store.to_device(batches, trainer.device)
    checker = DeviceChecker(reference, trainer.device)
    times, per_epoch, previous = [], [], {}
    for _ in range(epochs):
        t0 = time.perf_counter()
        checking = 0.0
        for x, idx, indices in batches:
            if transfer == "copy":
                x = x.to(trainer.device)
            trainer(x, idx)
            c0 = time.perf_counter()
            checker(x, indices)
            checking += time.perf_counter() - c0
        trainer.sync()
        times.append(time.perf_counter() - t0 - checking)
        if store is not None:
            now = store.stats()
            per_epoch.append({k: now.get(k, 0) - previous.get(k, 0) for k in STAT_KEYS})
            previous = dict(now)
    del batches, loader
    if store is not None:
        store.close()
        if options["disk"]:
            shutil.rmtree(store_dir, ignore_errors=True)
    return {"epoch_times": times, "total": sum(times), "per_epoch": per_epoch,
            "checked": checker.checked, "wrong": checker.wrong}


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


def ratios(results):
    """Per model and worker count: each configuration's total against no_cache
    with the same transfer, and to_device against copy."""
    out = {}
    for model, by_workers in results.items():
        for workers, runs in by_workers.items():
            r = {}
            for transfer in TRANSFERS:
                base = runs.get(f"no_cache/{transfer}")
                for config in CONFIGS[1:]:
                    run_ = runs.get(f"{config}/{transfer}")
                    if base and run_:
                        r[f"{config}/{transfer} vs no_cache"] = run_["total"] / base["total"]
            for config in CONFIGS:
                a, b = runs.get(f"{config}/to_device"), runs.get(f"{config}/copy")
                if a and b:
                    r[f"{config}: to_device vs copy"] = a["total"] / b["total"]
            out[f"{model}/{workers}"] = r
    return out


def merge(paths, out_path):
    """One results file from runs split across commands (the GPU machine
    allows 10 minutes a command). They must share the machine kind and the
    settings other than models and workers."""
    parts = []
    for p in paths:
        with open(p) as f:
            parts.append(json.load(f))
    if any(p.get("skipped") for p in parts):
        raise SystemExit("gpu_bench: cannot merge a skipped run")
    first = parts[0]
    fixed = ("images", "epochs", "batch", "ram_ratio", "amp")
    for p in parts[1:]:
        if any(p["settings"].get(k) != first["settings"].get(k) for k in fixed):
            raise SystemExit("gpu_bench: runs differ in " + ", ".join(fixed))
        if p["machine"].get("gpu") != first["machine"].get("gpu"):
            raise SystemExit("gpu_bench: runs come from different GPUs")
    out = {"machine": first["machine"], "settings": dict(first["settings"]), "results": {}}
    for p in parts:
        for model, by_workers in p["results"].items():
            out["results"].setdefault(model, {}).update(by_workers)
    out["settings"]["models"] = list(out["results"])
    out["settings"]["workers"] = sorted({int(w) for r in out["results"].values() for w in r})
    out["ratios"] = ratios(out["results"])
    out["wrong"] = sum(p["wrong"] for p in parts)
    out["took_s"] = sum(p["took_s"] for p in parts)
    out["merged_from"] = [os.path.basename(p) for p in paths]
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {out_path} from {len(parts)} runs; {out['wrong']} wrong samples")
    return 1 if out["wrong"] else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--models", default=None, help="comma-separated timm names, or tiny")
    parser.add_argument("--workers", default=None, help="comma-separated, default 0,8")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dir", default="/var/tmp/opt4store-gpu")
    parser.add_argument("--json", default=None)
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="join the results of several runs (one model each, say) "
                             "into --json; runs nothing")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.json or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "results", "gpu_bench.json"))

    here = os.path.dirname(os.path.abspath(__file__))
    json_path = args.json or os.path.join(
        here, "results", "tmp" if args.quick else "", "gpu_bench.json")
    os.makedirs(os.path.dirname(json_path), exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        reason = "no CUDA device (torch.cuda.is_available() is False on this machine)"
        print(f"gpu_bench: skipped: {reason}")
        try:
            with open(json_path) as f:
                earlier = json.load(f)
        except (OSError, ValueError):
            earlier = {}
        if earlier.get("results"):
            # Results from a GPU machine stay; the report shows their date.
            print(f"gpu_bench: kept the results of {earlier['machine'].get('date')} "
                  f"({earlier['machine'].get('gpu')}) in {json_path}")
            return 0
        with open(json_path, "w") as f:
            json.dump({"skipped": reason, "machine": machine("cpu")}, f, indent=1)
        return 0

    models = (args.models.split(",") if args.models else
              [MODELS[0]] if args.quick else list(MODELS))
    workers_list = ([int(w) for w in args.workers.split(",")] if args.workers else
                    [0] if args.quick else [0, 8])
    n = args.images or (96 if args.quick else 1000)
    epochs = args.epochs or (2 if args.quick else 5)
    ds = image_set(args.dir, n)
    reference = reference_for(ds, n)
    store_dir = os.path.join(args.dir, "store")

    settings = {"mode": "quick" if args.quick else "full", "images": n, "jpeg_side": 512,
                "sample_shape": [3, OUT, OUT], "decoded_bytes": n * 3 * OUT * OUT,
                "ram_ratio": RAM_RATIO, "epochs": epochs, "batch": BATCH,
                "workers": workers_list, "models": models, "amp": device.type == "cuda",
                "warmup_steps": WARMUP_STEPS, "checked_indices": len(reference),
                "reference_resnet50_seconds": REFERENCE_RESNET50}
    started = time.perf_counter()
    results, wrong = {}, 0
    for model in models:
        trainer = Trainer(model, device)
        trainer.warm_up((torch.stack([ds[i] for i in range(BATCH)]), torch.arange(BATCH)))
        results[model] = {}
        for workers in workers_list:
            runs = {}
            for config in CONFIGS:
                for transfer in TRANSFERS:
                    r = run(config, transfer, ds, trainer, reference, workers, epochs, store_dir)
                    runs[f"{config}/{transfer}"] = r
                    wrong += r["wrong"]
                    print(f"{model:24s} workers={workers} {config:18s} {transfer:9s} "
                          f"total {r['total']:8.3f} s  epochs "
                          + " ".join(f"{t:.3f}" for t in r["epoch_times"])
                          + f"  checked {r['checked']} wrong {r['wrong']}", flush=True)
            results[model][str(workers)] = runs
        del trainer
    out = {"machine": machine(device), "settings": settings, "results": results,
           "ratios": ratios(results), "wrong": wrong, "took_s": time.perf_counter() - started}
    for key, r in out["ratios"].items():
        for name, value in r.items():
            print(f"{key:32s} {name:40s} {value:.3f}")
    with open(json_path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {json_path}; {wrong} wrong samples; {out['took_s']:.0f} s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
