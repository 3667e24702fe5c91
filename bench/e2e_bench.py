#!/usr/bin/env python3
"""End-to-end loading through opt4store with a small CPU model step (issue 5,
parts 4 and 2).

The dataset is bench/demo.py's: a few hundred 512x512 JPEGs, decoded and
resized to 3x256x256 uint8 on every access (generated once into a work
folder under /var/tmp and reused). Each configuration reads it for E
shuffled epochs (the same shuffles for all), batch 32, with num_workers 0
and 2, and runs a small conv net forward + backward on each batch (a few ms,
so that decoding dominates uncached epochs, as in training):

  no_cache           the plain Dataset;
  lru_ram            policy="lru", disk=0      (RAM only)
  static_ram         policy="static", disk=0   (RAM only)
  opt_ram            policy="opt", disk=0      (RAM only)
  opt_disk           policy="opt" + disk tier, prefetch_depth=1 (no prefetch)
  opt_disk_prefetch  policy="opt" + disk tier, default prefetch depth
  all_in_ram         policy="opt", disk=0, RAM for every item (reference)

RAM is 30% of the decoded bytes except for all_in_ram. The disk-tier
configurations, and no_cache, are then restarted: a new process reopens the
store (or builds the plain Dataset) and reads one more epoch, with its time
to the first batch measured from before the open.

Part 2 (per_read): the cost of one read from Python, 3x256x256 uint8: the
raw dataset[i] (JPEG decode + resize), a plain dict cache (lookup, and
lookup + clone), and CachedDataset's RAM hit, disk hit (the store reopened
with a RAM tier of 1 item) and miss (decode + put, written through to disk).

Part 1b (paired): the two goals that compare opt_disk_prefetch with another
configuration, measured again in --paired rounds (default 3, --quick 1).
Each round runs no_cache's epoch 1 and the whole runs of opt_disk_prefetch
and all_in_ram back to back, in an order rotated by the round, so that each
ratio compares runs seconds apart; in part 1 the two runs it compares are
minutes apart, and this machine's speed drifts by tens of percent in that
time. Those two goals are judged by the median of the rounds' ratios; the
whole-run ratio of part 1 is kept beside it.

Every configuration checks the items it returns for a fixed sample of
indices against a decode made before the timed runs (torch.equal); any
mismatch makes the exit status 1. Missed speed goals are printed as
MISSED with their ratios; they do not change the exit status.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/e2e_bench.py
       [--quick] [--images N] [--paired ROUNDS] [--dir DIR] [--json FILE]
--quick: fewer images, 3 epochs, workers 0 only, 1 paired round; writes
bench/results/tmp/e2e.json unless --json is given (full: bench/results/e2e.json).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

import torch
import torch.utils.data

import opt4store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo import OUT, JpegDataset, WithIndex, make_images  # noqa: E402

BATCH = 32
RAM_RATIO = 0.3
SEED = 1            # the shuffles of the E epochs (same for every configuration)
RESTART_SEED = 99   # the restart epoch's shuffle
CHECKED = 64        # indices whose returned items are compared with a fresh decode
STAT_KEYS = ("accesses", "hits_ram", "hits_disk", "source_loads", "prefetched", "drift")


# ---- the model step


class Step:
    """A tiny conv net, forward + backward + SGD on a 4x subsampled batch:
    a few ms per batch of 32 x 3x256x256 on one core."""

    def __init__(self):
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)

    def __call__(self, x):
        y = self.net(x[:, :, ::4, ::4].float().div_(255))
        loss = y.square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


class Checker:
    """Compares returned items at the reference indices with their decode
    (on `device`, where the batches arrive; gpu_bench.py passes the GPU)."""

    def __init__(self, reference, device=None):
        self.reference = (reference if device is None else
                          {i: t.to(device) for i, t in reference.items()})
        self.checked = 0
        self.wrong = 0

    def __call__(self, x, idx):
        for k, i in enumerate(idx.tolist()):
            ref = self.reference.get(i)
            if ref is not None:
                self.checked += 1
                if not torch.equal(x[k], ref):
                    self.wrong += 1


def make_loader(ds, sampler, workers):
    return torch.utils.data.DataLoader(WithIndex(ds), sampler=sampler, batch_size=BATCH,
                                       num_workers=workers, persistent_workers=workers > 0)


def one_epoch(loader, step, checker, t0=None):
    """(epoch time, time to the first batch), both from t0 (default: now)."""
    t0 = time.perf_counter() if t0 is None else t0
    first = None
    for x, idx in loader:
        if first is None:
            first = time.perf_counter() - t0
        checker(x, idx)
        step(x)
    return time.perf_counter() - t0, first


def store_options(name, decoded, n):
    ram = int(decoded * RAM_RATIO)
    disk = decoded * 2
    return {
        "no_cache": None,
        "lru_ram": {"policy": "lru", "ram": ram, "disk": 0},
        "static_ram": {"policy": "static", "ram": ram, "disk": 0},
        "opt_ram": {"policy": "opt", "ram": ram, "disk": 0},
        "opt_disk": {"policy": "opt", "ram": ram, "disk": disk, "prefetch_depth": 1},
        "opt_disk_prefetch": {"policy": "opt", "ram": ram, "disk": disk},
        "all_in_ram": {"policy": "opt", "ram": int(decoded * 1.25), "disk": 0},
    }[name]


CONFIGS = ("no_cache", "lru_ram", "static_ram", "opt_ram", "opt_disk", "opt_disk_prefetch",
           "all_in_ram")


def written_once(folder, n, side, write):
    """folder, once it holds n JPEGs of side x side: write(folder, n) fills it
    unless it holds n files already (a run reuses the last run's)."""
    os.makedirs(folder, exist_ok=True)
    if len(os.listdir(folder)) != n:
        shutil.rmtree(folder)
        os.makedirs(folder)
        print(f"writing {n} JPEGs of {side}x{side} to {folder} ...", flush=True)
        write(folder, n)
    return folder


def image_set(work_dir, n):
    """The n JPEGs under work_dir/images-n, written once and reused."""
    return JpegDataset(written_once(os.path.join(work_dir, f"images-{n}"), n, 512, make_images))


def reference_for(ds, n):
    g = torch.Generator().manual_seed(7)
    picks = torch.randperm(n, generator=g)[:min(CHECKED, n)].tolist()
    return {i: ds[i] for i in picks}


# ---- one configuration


def run_config(name, options, ds, store_dir, epochs, workers, reference):
    checker = Checker(reference)
    step = Step()
    shuffle = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(SEED))
    store = None
    if options is None:
        loader = make_loader(ds, shuffle, workers)
    else:
        path = store_dir if options["disk"] else None
        if path:
            shutil.rmtree(path, ignore_errors=True)
        store = opt4store.Store(path, **options)
        sampler = opt4store.PlannedSampler(shuffle, epochs=epochs)
        loader = make_loader(opt4store.CachedDataset(ds, store, sampler), sampler, workers)
    times, per_epoch, previous = [], [], {}
    for _ in range(epochs):
        t, _ = one_epoch(loader, step, checker)
        times.append(t)
        if store is not None:
            now = store.stats()
            per_epoch.append({k: now.get(k, 0) - previous.get(k, 0) for k in STAT_KEYS})
            previous = dict(now)
    del loader
    stats = None
    if store is not None:
        stats = {k: v for k, v in store.stats().items() if isinstance(v, (int, float))}
        store.close()
    return {"epoch_times": times, "per_epoch": per_epoch, "stats": stats,
            "checked": checker.checked, "wrong": checker.wrong,
            "restart_epoch_time": None, "restart_first_batch": None}


# Part 1b: the runs of a paired round, and the goals judged from them (the
# goal -> the round's ratio).
PAIRED = ("no_cache", "opt_disk_prefetch", "all_in_ram")
PAIRED_GOALS = {"later_epochs_within_20pct_of_all_in_ram": "later_vs_all_in_ram",
                "epoch1_at_most_15pct_slower": "epoch1_vs_no_cache"}


def paired_rounds(ds, store_dir, epochs, workers, reference, decoded, rounds):
    """(rounds, wrong): per round, no_cache's epoch 1 and the whole runs of
    opt_disk_prefetch and all_in_ram, in an order rotated by the round, and
    the two ratios their goals take."""
    out, wrong = [], 0
    n = len(ds)
    for r in range(rounds):
        k = r % len(PAIRED)
        order = PAIRED[k:] + PAIRED[:k]
        times = {}
        for name in order:
            res = run_config(name, store_options(name, decoded, n), ds, store_dir,
                             1 if name == "no_cache" else epochs, workers, reference)
            shutil.rmtree(store_dir, ignore_errors=True)
            times[name] = res["epoch_times"]
            wrong += res["wrong"]
        base, pf, ram = (times[name] for name in PAIRED)
        out.append({"order": list(order), "epoch_times": times,
                    "later_vs_all_in_ram": later(pf) / later(ram),
                    "epoch1_vs_no_cache": pf[0] / base[0]})
    return out, wrong


def restart(images_dir, store_dir, options, workers, reference_n):
    """A new process: reopens the store (or the plain Dataset) and reads one epoch."""
    spec = {"images_dir": images_dir, "store_dir": store_dir, "options": options,
            "workers": workers, "reference_n": reference_n}
    return run_child(os.path.abspath(__file__), spec)


def run_child(script, spec):
    """Runs `script --restart-child SPEC` in a new interpreter; its last
    stdout line, as JSON."""
    child = subprocess.run([sys.executable, script, "--restart-child", json.dumps(spec)],
                           capture_output=True, text=True, env=os.environ)
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        raise RuntimeError(f"restart child failed with status {child.returncode}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def restart_child(spec):
    torch.set_num_threads(1)
    ds = JpegDataset(spec["images_dir"])
    checker = Checker(reference_for(ds, spec["reference_n"]))
    step = Step()
    shuffle = torch.utils.data.RandomSampler(
        ds, generator=torch.Generator().manual_seed(RESTART_SEED))
    t0 = time.perf_counter()  # the open counts towards the first batch
    store, opened = None, None
    if spec["options"] is None:
        loader = make_loader(ds, shuffle, spec["workers"])
    else:
        store = opt4store.Store(spec["store_dir"], **spec["options"])
        sampler = opt4store.PlannedSampler(shuffle, epochs=1)
        cached = opt4store.CachedDataset(ds, store, sampler)
        opened = time.perf_counter() - t0
        loader = make_loader(cached, sampler, spec["workers"])
    t, first = one_epoch(loader, step, checker, t0)
    del loader
    stats = None
    if store is not None:
        stats = {k: v for k, v in store.stats().items() if isinstance(v, (int, float))}
        store.close()
    print(json.dumps({"time": t, "first_batch": first, "open": opened, "stats": stats,
                      "checked": checker.checked, "wrong": checker.wrong}))


# ---- part 2: per-read overhead


class Subset(torch.utils.data.Dataset):
    def __init__(self, ds, n):
        self.ds, self.n = ds, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.ds[i]


def verify_epoch(cds, sampler, values):
    """Reads one more planned epoch, untimed, and counts wrong values.
    (The timed loops drop what they read: keeping 192 KiB tensors alive
    makes each new one a fresh mmap, which would be timed too.)"""
    return sum(not torch.equal(cds[index], values[int(index)]) for index in iter(sampler))



def median_epoch_read_us(cds, sampler, rounds, m):
    """Median over `rounds` epochs of the sampler of the time per read, in us.
    What is read is dropped at once (keeping it changes the allocator's cost)."""
    per_read_ns = []
    for _ in range(rounds):
        indices = list(iter(sampler))
        t0 = time.perf_counter_ns()
        for index in indices:
            cds[index]
        per_read_ns.append((time.perf_counter_ns() - t0) / m)
    return statistics.median(per_read_ns) / 1e3

def per_read(ds, m, rounds, store_dir):
    src = Subset(ds, m)
    decoded = m * 3 * OUT * OUT
    out = {"items": m, "rounds": rounds, "shape": [3, OUT, OUT], "dtype": "uint8"}
    t0 = time.perf_counter_ns()
    values = [src[i] for i in range(m)]
    out["raw_decode_us"] = (time.perf_counter_ns() - t0) / m / 1e3
    cache = dict(enumerate(values))
    get_ns, clone_ns = [], []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for i in range(m):
            cache[i]
        t1 = time.perf_counter_ns()
        for i in range(m):
            cache[i].clone()
        t2 = time.perf_counter_ns()
        get_ns.append((t1 - t0) / m)
        clone_ns.append((t2 - t1) / m)
    out["dict_get_us"] = statistics.median(get_ns) / 1e3
    out["dict_get_clone_us"] = statistics.median(clone_ns) / 1e3

    wrong = 0
    # Misses (decode + put, written through to the disk tier), then RAM hits.
    shutil.rmtree(store_dir, ignore_errors=True)
    store = opt4store.Store(store_dir, ram=int(decoded * 1.25), disk=decoded * 2)
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(m)),
                                       epochs=rounds + 2)
    cds = opt4store.CachedDataset(src, store, sampler)
    t0 = time.perf_counter_ns()
    for index in iter(sampler):
        cds[index]
    out["miss_us"] = (time.perf_counter_ns() - t0) / m / 1e3
    out["ram_hit_us"] = median_epoch_read_us(cds, sampler, rounds, m)
    wrong += verify_epoch(cds, sampler, values)
    s = store.stats()
    out["ram_phase_stats"] = {k: s.get(k, 0) for k in STAT_KEYS}
    store.close()

    # Disk hits: the store reopened with a RAM tier of one item.
    store = opt4store.Store(store_dir, ram_items=1, disk=decoded * 2, prefetch_depth=1)
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(m)),
                                       epochs=rounds + 1)
    cds = opt4store.CachedDataset(src, store, sampler)
    out["disk_hit_us"] = median_epoch_read_us(cds, sampler, rounds, m)
    wrong += verify_epoch(cds, sampler, values)
    s = store.stats()
    out["disk_phase_stats"] = {k: s.get(k, 0) for k in STAT_KEYS}
    store.close()
    shutil.rmtree(store_dir, ignore_errors=True)
    out["wrong"] = wrong
    return out


# ---- report


def machine_info():
    """Cores, CPU model, date, load average, torch and Python, for a
    benchmark's JSON."""
    machine = {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "load": list(os.getloadavg()), "torch": torch.__version__,
               "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        if names:
            machine["cpu"] = names[0]
    except OSError:
        pass
    return machine


def later(times):
    return sum(times[1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--paired", type=int, default=None, metavar="ROUNDS",
                        help="paired rounds per worker count (default 3, --quick 1)")
    parser.add_argument("--dir", default="/var/tmp/opt4store-e2e",
                        help="work folder; the JPEGs are kept there and reused")
    parser.add_argument("--json", default=None)
    parser.add_argument("--restart-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.restart_child:
        restart_child(json.loads(args.restart_child))
        return 0

    started = time.perf_counter()
    torch.set_num_threads(1)
    n = args.images or (160 if args.quick else 1000)
    epochs = 3 if args.quick else 5
    rounds = args.paired if args.paired is not None else (1 if args.quick else 3)
    worker_counts = (0,) if args.quick else (0, 2)
    here = os.path.dirname(os.path.abspath(__file__))
    json_path = args.json or os.path.join(here, "results", "tmp" if args.quick else "", "e2e.json")

    store_dir = os.path.join(args.dir, "store")
    ds = image_set(args.dir, n)
    images_dir = os.path.dirname(ds.files[0])
    decoded = n * 3 * OUT * OUT
    reference = reference_for(ds, n)

    machine = machine_info()
    settings = {"mode": "quick" if args.quick else "full", "images": n, "jpeg_side": 512,
                "sample_shape": [3, OUT, OUT], "decoded_bytes": decoded,
                "ram_ratio": RAM_RATIO, "ram_bytes": int(decoded * RAM_RATIO),
                "all_in_ram_bytes": int(decoded * 1.25), "disk_bytes": decoded * 2,
                "epochs": epochs, "batch": BATCH, "workers": list(worker_counts),
                "model_step": "conv3x3(3->16,stride 2)+pool+linear fwd+bwd+SGD on the batch"
                              " subsampled to 64x64, 1 torch thread",
                "paired_rounds": rounds, "shuffle_seed": SEED, "restart_seed": RESTART_SEED,
                "checked_indices": CHECKED,
                "work_dir": args.dir}
    print(f"opt4store e2e_bench ({settings['mode']}): {n} JPEGs 512x512 -> 3x{OUT}x{OUT} uint8"
          f" ({decoded / 2**20:.1f} MiB decoded), RAM {RAM_RATIO:.0%} ="
          f" {decoded * RAM_RATIO / 2**20:.1f} MiB, {epochs} epochs, batch {BATCH},"
          f" workers {list(worker_counts)}; {machine['cores']} cores, load"
          f" {machine['load'][0]:.1f}", flush=True)

    configs = {name: {"workers": {}} for name in CONFIGS}
    bad = 0
    for workers in worker_counts:
        for name in CONFIGS:
            options = store_options(name, decoded, n)
            r = run_config(name, options, ds, store_dir, epochs, workers, reference)
            if name in ("no_cache", "opt_disk", "opt_disk_prefetch"):
                rs = restart(images_dir, store_dir, options, workers, n)
                r["restart_epoch_time"] = rs["time"]
                r["restart_first_batch"] = rs["first_batch"]
                r["restart_stats"] = rs["stats"]
                r["restart_open"] = rs["open"]
                r["checked"] += rs["checked"]
                r["wrong"] += rs["wrong"]
            shutil.rmtree(store_dir, ignore_errors=True)
            bad += r["wrong"]
            configs[name]["workers"][str(workers)] = r
            print(f"  workers {workers} {name:<18} epochs "
                  + " ".join(f"{t:6.2f}" for t in r["epoch_times"])
                  + (f"  restart {r['restart_epoch_time']:6.2f} s"
                     f" (first batch {r['restart_first_batch'] * 1e3:.0f} ms"
                     + (f", open + plan {r['restart_open'] * 1e3:.0f} ms"
                        if r.get("restart_open") is not None else "") + ")"
                     if r["restart_epoch_time"] is not None else "")
                  + f"  checked {r['checked']}, wrong {r['wrong']}", flush=True)

    # Part 1b.
    paired = {}
    for workers in worker_counts:
        paired[str(workers)], wrong = paired_rounds(ds, store_dir, epochs, workers, reference,
                                                    decoded, rounds)
        bad += wrong
        for p in paired[str(workers)]:
            print(f"  workers {workers} paired ({', '.join(p['order'])}):"
                  f" epochs 2-{epochs} vs all_in_ram {p['later_vs_all_in_ram']:.2f},"
                  f" epoch 1 vs no_cache {p['epoch1_vs_no_cache']:.2f}", flush=True)

    # The table.
    print()
    print(f"{'config':<19}{'wk':>3}{'epoch 1':>9}{'ep 2-' + str(epochs) + ' avg':>11}"
          f"{'speedup 2-' + str(epochs):>13}{'ep1 cost':>10}{'hit rate':>10}{'hit 2-E':>9}"
          f"{'restart':>9}{'1st batch':>11}")
    for workers in worker_counts:
        base = configs["no_cache"]["workers"][str(workers)]
        for name in CONFIGS:
            r = configs[name]["workers"][str(workers)]
            t = r["epoch_times"]
            speed = later(base["epoch_times"]) / later(t)
            cost = t[0] / base["epoch_times"][0] - 1
            r["speedup_later_epochs"] = speed
            r["epoch1_cost"] = cost
            if r["stats"]:
                s = r["stats"]
                hr = (s["hits_ram"] + s["hits_disk"]) / max(1, s["accesses"])
                rest = r["per_epoch"][1:]
                acc = sum(e["accesses"] for e in rest)
                hr_later = sum(e["hits_ram"] + e["hits_disk"] for e in rest) / max(1, acc)
                r["hit_rate"], r["hit_rate_later_epochs"] = hr, hr_later
                hits = f"{hr:>10.1%}{hr_later:>9.1%}"
            else:
                hits = f"{'-':>10}{'-':>9}"
            rst = (f"{r['restart_epoch_time']:>8.2f}s{r['restart_first_batch'] * 1e3:>9.0f}ms"
                   if r["restart_epoch_time"] is not None else f"{'-':>9}{'-':>11}")
            print(f"{name:<19}{workers:>3}{t[0]:>8.2f}s{later(t) / (epochs - 1):>10.2f}s"
                  f"{speed:>12.2f}x{cost:>+10.0%}{hits}{rst}")
    print("hit rate: (RAM + disk hits) / accesses over all epochs; hit 2-E: over epochs 2 on;"
          " restart: the epoch read by a new process, first batch timed from before the open.")

    # Goals.
    goals = {}
    print()
    for workers in worker_counts:
        w = str(workers)
        base = configs["no_cache"]["workers"][w]
        pf = configs["opt_disk_prefetch"]["workers"][w]
        ram = configs["all_in_ram"]["workers"][w]
        checks = {
            "later_epochs_4x_vs_no_cache": (later(base["epoch_times"]) / later(pf["epoch_times"]),
                                            ">=", 4.0),
            "later_epochs_within_20pct_of_all_in_ram": (
                later(pf["epoch_times"]) / later(ram["epoch_times"]), "<=", 1.2),
            "epoch1_at_most_15pct_slower": (pf["epoch_times"][0] / base["epoch_times"][0],
                                            "<=", 1.15),
            "restart_epoch_4x_vs_no_cache": (base["restart_epoch_time"] /
                                             pf["restart_epoch_time"], ">=", 4.0),
        }
        goals[w] = {}
        for goal, (ratio, op, target) in checks.items():
            g = goals[w][goal] = {"ratio": ratio, "target": f"{op} {target}"}
            judged, shown = ratio, f"ratio {ratio:6.2f}"
            if goal in PAIRED_GOALS and paired[w]:
                values = [p[PAIRED_GOALS[goal]] for p in paired[w]]
                g["paired"] = {"median": statistics.median(values), "min": min(values),
                               "max": max(values), "rounds": len(values)}
                judged = g["paired"]["median"]
                shown += (f", paired {judged:.2f} [{min(values):.2f}-{max(values):.2f}]"
                          f" over {len(values)}")
            g["met"] = judged >= target if op == ">=" else judged <= target
            print(f"goal workers {workers}: {goal:<42} {shown} (target {op} {target}):"
                  f" {'met' if g['met'] else 'MISSED'}")

    # Part 2.
    m = 48 if args.quick else 128
    pr = per_read(ds, min(m, n), 3 if args.quick else 5, store_dir + "-per-read")
    bad += pr["wrong"]
    print()
    print(f"per read from Python, 3x{OUT}x{OUT} uint8, {pr['items']} items"
          f" (median of {pr['rounds']} rounds):")
    print(f"  raw dataset[i] (JPEG decode+resize) {pr['raw_decode_us']:10.1f} us")
    print(f"  dict cache: lookup                  {pr['dict_get_us']:10.2f} us")
    print(f"  dict cache: lookup + clone          {pr['dict_get_clone_us']:10.2f} us")
    print(f"  store RAM hit                       {pr['ram_hit_us']:10.2f} us")
    ds_ = pr["disk_phase_stats"]
    print(f"  store disk hit (reopened, RAM 1)    {pr['disk_hit_us']:10.2f} us  ({ds_['hits_disk']}"
          f" disk hits, {ds_['hits_ram']} RAM hits, {ds_['prefetched']} prefetched; files in the"
          f" page cache)")
    print(f"  store miss (decode + put + write)   {pr['miss_us']:10.1f} us"
          f"  ({pr['miss_us'] - pr['raw_decode_us']:+.1f} us against the raw decode)")

    took = time.perf_counter() - started
    result = {"machine": machine, "settings": settings, "configs": configs, "paired": paired,
              "goals": goals, "per_read": pr, "wrong": bad, "took_s": took}
    os.makedirs(os.path.dirname(json_path), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nchecked items: {bad} wrong. Took {took:.0f} s. Wrote {json_path}.")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
