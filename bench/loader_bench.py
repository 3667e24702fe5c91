#!/usr/bin/env python3
"""The path from the store into the training step (issue 13): torch's
DataLoader against opt4store.DataLoader, as users run them.

Setup (the issue's): bench/demo.py's JPEGs (512x512, decoded and resized to
3x256x256 uint8 on every access), each sample (image, index), batch 32,
shuffled, the same number of workers for every loader (2 by default), a new
loader for every epoch, 3 epochs, then a restart (a new process reopens the
store and reads one epoch). RAM for 30% of the decoded bytes plus the disk
tier. Loaders:

  no_cache      torch's DataLoader over the plain dataset
  torch_cached  torch's DataLoader over a CachedDataset (its __getitems__)
  opt4store     opt4store.DataLoader over a CachedDataset

The epoch 1 goal: the median ratio of EPOCH1_PAIRS pairs (no cache's
epoch 1, opt4store's with a fresh store; which runs first alternates).

Then, with a RAM budget that holds the whole dataset (no disk tier):
  - a cached epoch of opt4store.DataLoader (workers as above) against the
    ideal in one process: the faster of torch.stack over the samples held in
    a list, and a copy of each sample into a batch buffer that is reused;
  - the same against torch's DataLoader over that in-memory list (same
    workers): the median ratio of ALL_IN_RAM_PAIRS alternating pairs;
  - whether a cached epoch started any worker process.
Issue 14's cases (workers as above): drop_last against the same run
without it, with opt4store.DataLoader (the goal: it loads the dropped tail
into the store in the epoch that drops it, so that epochs 2-3 decode
nothing) and with torch's DataLoader over a CachedDataset (information: its
unread tails must not stall the next epoch, but epoch 1 leaves its last
partial batch unread, so epoch 2 decodes those items for the first time);
source loads are printed per epoch, and epoch 3 alone as information. A
cached epoch here is about 0.1 s: the median of DROP_LAST_PAIRS pairs; and a
wrapper Dataset calling ds[int(i)] in the workers (torch's DataLoader)
against PlannedIndex reads with 0 workers (source loads).
And a cheap random transform (flip + convert to float, transform=) against
the plain dataset with the same transform; and Store.read_into of RAM hits
(150 KiB items, batch 64, into a batch tensor) against a plain copy of the
same bytes (torch's copy_, memcpy) in the same process.

Every batch of every cached loader is checked: each sample's index says what
it must be, and CHECKED indices are compared with a fresh decode
(torch.equal); a mismatch makes the exit status 1. Goals are printed with
their ratios; a missed goal says MISSED and does not change the exit status.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/loader_bench.py
       [--quick] [--images N] [--workers W] [--dir DIR] [--json FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch
import torch.utils.data

import opt4store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo import FINGERPRINT, OUT, JpegDataset, WithIndex  # noqa: E402
from e2e_bench import image_set, machine_info, run_child  # noqa: E402

BATCH = 32
RAM_RATIO = 0.3
SEED = 1
RESTART_SEED = 99
CHECKED = 64
LOADERS = ("no_cache", "torch_cached", "opt4store")


class InMemory(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[int(i)]


def flip_float(sample):
    """A cheap random augmentation: a horizontal flip half the time, then
    uint8 -> float32 in [0, 1]."""
    image, index = sample
    if torch.rand(()) < 0.5:
        image = image.flip(-1)
    return image.float().div_(255), index


class Transformed(torch.utils.data.Dataset):
    def __init__(self, ds, transform):
        self.ds, self.transform = ds, transform

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.transform(self.ds[i])


class Checker:
    """Each sample against its index: its label, and for CHECKED indices the
    decoded image (transformed batches: the label only)."""

    def __init__(self, reference):
        self.reference = reference
        self.checked = self.wrong = self.samples = 0

    def __call__(self, batch, images=True):
        x, idx = batch
        self.samples += len(idx)
        if images:
            for k, i in enumerate(idx.tolist()):
                ref = self.reference.get(i)
                if ref is not None:
                    self.checked += 1
                    self.wrong += not torch.equal(x[k], ref)


def fresh_store(store_dir, decoded):
    """An empty store with the main runs' budgets (RAM_RATIO + the disk tier)."""
    shutil.rmtree(store_dir, ignore_errors=True)
    return opt4store.Store(store_dir, ram=int(decoded * RAM_RATIO), disk=decoded * 2,
                           fingerprint=FINGERPRINT)


def torch_loader(ds, sampler, workers):
    return torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                       num_workers=workers)


def epoch(loader, check, expected_order=None, images=True):
    """(seconds, batches); checks each batch, outside the timed part."""
    t0 = time.perf_counter()
    checking = 0.0
    order = []
    for batch in loader:
        c0 = time.perf_counter()
        check(batch, images)
        order.extend(batch[1].tolist())
        checking += time.perf_counter() - c0
    elapsed = time.perf_counter() - t0 - checking
    if expected_order is not None and order != expected_order:
        check.wrong += 1
    return elapsed


def run_loader(name, jpeg, store_dir, decoded, workers, epochs, reference):
    check = Checker(reference)
    shuffle = torch.utils.data.RandomSampler(jpeg, generator=torch.Generator().manual_seed(SEED))
    times = []
    store = None
    if name == "no_cache":
        for _ in range(epochs):
            times.append(epoch(torch_loader(WithIndex(jpeg), shuffle, workers), check))
    else:
        store = fresh_store(store_dir, decoded)
        sampler = opt4store.PlannedSampler(shuffle, epochs=epochs)
        ds = opt4store.CachedDataset(WithIndex(jpeg), store, sampler)
        for e in range(epochs):
            order = sampler.plan[e * len(jpeg):(e + 1) * len(jpeg)].tolist()
            loader = torch_loader(ds, sampler, workers) if name == "torch_cached" else \
                opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=workers)
            times.append(epoch(loader, check, order))
        stats = store.stats()
        store.close()
    result = {"epoch_times": times, "checked": check.checked, "wrong": check.wrong,
              "samples": check.samples,
              "stats": {k: stats[k] for k in ("hits_ram", "hits_disk", "source_loads",
                                              "prefetched", "expect_timeouts",
                                              "ram_bytes_peak")}
              if store is not None else None}
    rs = restart(store_dir, name, workers, len(jpeg), os.path.dirname(jpeg.files[0]))
    result.update(restart_time=rs["time"], restart_first_batch=rs["first_batch"])
    result["checked"] += rs["checked"]
    result["wrong"] += rs["wrong"]
    return result


# The epoch 1 goal's pairs (no cache's epoch 1 and opt4store.DataLoader's).
EPOCH1_PAIRS = 5


def first_epoch(name, jpeg, store_dir, decoded, workers, check):
    """Epoch 1 of "no_cache" or "opt4store" as run_loader runs it (a fresh store)."""
    shuffle = torch.utils.data.RandomSampler(jpeg, generator=torch.Generator().manual_seed(SEED))
    if name == "no_cache":
        return epoch(torch_loader(WithIndex(jpeg), shuffle, workers), check)
    store = fresh_store(store_dir, decoded)
    sampler = opt4store.PlannedSampler(shuffle, epochs=3)
    ds = opt4store.CachedDataset(WithIndex(jpeg), store, sampler)
    order = sampler.plan[:len(jpeg)].tolist()
    elapsed = epoch(opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                         num_workers=workers), check, order)
    store.close()
    return elapsed


def epoch1_pairs(jpeg, store_dir, decoded, workers, reference):
    """Epoch 1 of opt4store.DataLoader and of no cache in EPOCH1_PAIRS pairs,
    alternating which runs first (the first may meet a colder page cache or
    the last store's writeback): per pair, the times and opt4store / no cache."""
    check = Checker(reference)
    pairs = []
    for k in range(EPOCH1_PAIRS):
        order = ("opt4store", "no_cache") if k % 2 == 0 else ("no_cache", "opt4store")
        times = {name: first_epoch(name, jpeg, store_dir, decoded, workers, check)
                 for name in order}
        pairs.append({"first": order[0], **times, "ratio": times["opt4store"] / times["no_cache"]})
    return {"pairs": pairs, "ratios": [p["ratio"] for p in pairs], "checked": check.checked,
            "wrong": check.wrong}


def restart(store_dir, name, workers, n, images_dir):
    spec = {"store_dir": store_dir, "name": name, "workers": workers, "n": n,
            "images_dir": images_dir}
    return run_child(os.path.abspath(__file__), spec)


def restart_child(spec):
    torch.set_num_threads(1)
    jpeg = JpegDataset(spec["images_dir"])
    check = Checker(reference_for(jpeg))
    shuffle = torch.utils.data.RandomSampler(
        jpeg, generator=torch.Generator().manual_seed(RESTART_SEED))
    t0 = time.perf_counter()  # the open counts
    first = None
    store = None
    if spec["name"] == "no_cache":
        loader = torch_loader(WithIndex(jpeg), shuffle, spec["workers"])
    else:
        store = opt4store.Store(spec["store_dir"], fingerprint=FINGERPRINT)
        sampler = opt4store.PlannedSampler(shuffle, epochs=1)
        ds = opt4store.CachedDataset(WithIndex(jpeg), store, sampler)
        loader = torch_loader(ds, sampler, spec["workers"]) if spec["name"] == "torch_cached" \
            else opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                      num_workers=spec["workers"])
    checking = 0.0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        c0 = time.perf_counter()
        check(batch)
        checking += time.perf_counter() - c0
    elapsed = time.perf_counter() - t0 - checking
    if store is not None:
        store.close()
    print(json.dumps({"time": elapsed, "first_batch": first, "checked": check.checked,
                      "wrong": check.wrong}))


def reference_for(jpeg):
    g = torch.Generator().manual_seed(7)
    picks = torch.randperm(len(jpeg), generator=g)[:min(CHECKED, len(jpeg))].tolist()
    return {i: jpeg[i] for i in picks}


# ---- all in RAM

ALL_IN_RAM_PAIRS = 9  # the goal's pairs: torch's DataLoader over a list, a cached epoch


def all_in_ram(jpeg, store_dir, decoded, workers, epochs, reference):
    """opt4store.DataLoader with every sample in RAM against the ideal and
    against torch's DataLoader over an in-memory list."""
    samples = [(jpeg[i], i) for i in range(len(jpeg))]
    shuffle = torch.utils.data.RandomSampler(jpeg, generator=torch.Generator().manual_seed(SEED))
    order = list(shuffle)
    batches = [order[k:k + BATCH] for k in range(0, len(order), BATCH)]

    def stack_epoch():
        t0 = time.perf_counter()
        for b in batches:
            torch.stack([samples[i][0] for i in b])
            torch.tensor([samples[i][1] for i in b])
        return time.perf_counter() - t0

    buffer = torch.empty((BATCH,) + tuple(samples[0][0].shape), dtype=samples[0][0].dtype)
    labels = torch.empty(BATCH, dtype=torch.int64)

    def copy_epoch():
        t0 = time.perf_counter()
        for b in batches:
            for k, i in enumerate(b):
                buffer[k].copy_(samples[i][0])
                labels[k] = samples[i][1]
        return time.perf_counter() - t0

    ideal_stack = min(stack_epoch() for _ in range(epochs))
    ideal_copy = min(copy_epoch() for _ in range(epochs))
    check = Checker(reference)
    list_times = [epoch(torch_loader(InMemory(samples), shuffle, workers), check)
                  for _ in range(epochs)]

    shutil.rmtree(store_dir, ignore_errors=True)
    store = opt4store.Store(store_dir, ram=int(decoded * 1.25), disk=0)
    sampler = opt4store.PlannedSampler(shuffle, epochs=epochs + 1 + ALL_IN_RAM_PAIRS)
    ds = opt4store.CachedDataset(WithIndex(jpeg), store, sampler)
    started = []
    real_iter = torch.utils.data.DataLoader.__iter__

    def counting_iter(self):
        if not isinstance(self.dataset, InMemory):  # not the pairs' list loader
            started.append(self.num_workers)
        return real_iter(self)

    times = []
    pairs = []
    torch.utils.data.DataLoader.__iter__ = counting_iter
    try:
        for e in range(epochs + 1):
            if e == 1:
                started.clear()  # epoch 1 loads: its workers are expected
            times.append(epoch(opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                                    num_workers=workers), check))
        # 10-20 ms epochs: pairs back to back against the list, alternating.
        for k in range(ALL_IN_RAM_PAIRS):
            pair = {}
            for name in ("opt4store", "list_loader")[::1 if k % 2 == 0 else -1]:
                pair[name] = epoch(opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                                        num_workers=workers)
                                   if name == "opt4store" else
                                   torch_loader(InMemory(samples), shuffle, workers), check)
            pairs.append(dict(pair, ratio=pair["list_loader"] / pair["opt4store"]))
    finally:
        torch.utils.data.DataLoader.__iter__ = real_iter
    store.close()
    return {"ideal_stack": ideal_stack, "ideal_copy": ideal_copy, "list_loader": list_times,
            "opt4store": times, "worker_starts_cached": len(started), "pairs": pairs,
            "list_ratios": [p["ratio"] for p in pairs],
            "checked": check.checked, "wrong": check.wrong}


# ---- a cheap random transform


def with_transform(jpeg, store_dir, decoded, workers, epochs, reference):
    check = Checker(reference)
    shuffle = torch.utils.data.RandomSampler(jpeg, generator=torch.Generator().manual_seed(SEED))
    plain = [epoch(torch_loader(Transformed(WithIndex(jpeg), flip_float), shuffle, workers),
                   check, images=False) for _ in range(epochs)]
    store = fresh_store(store_dir, decoded)
    sampler = opt4store.PlannedSampler(shuffle, epochs=epochs)
    ds = opt4store.CachedDataset(WithIndex(jpeg), store, sampler, transform=flip_float)
    cached = []
    for e in range(epochs):
        order = sampler.plan[e * len(jpeg):(e + 1) * len(jpeg)].tolist()
        cached.append(epoch(opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                                 num_workers=workers), check, order,
                            images=False))
    store.close()
    return {"no_cache": plain, "opt4store": cached, "wrong": check.wrong}


# ---- positions nobody reads, and reads that lost their position (issue 14)


class Wrapper(torch.utils.data.Dataset):
    """A user's Dataset around the CachedDataset: ds[int(i)], no position."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        return self.inner[int(i)]


# The drop_last goal's pairs (opt4store.DataLoader without and with it).
DROP_LAST_PAIRS = 3
UNREAD_RUNS = tuple(  # name, loader, drop_last, wrapper, workers (None: --workers)
    (f"opt4store_{kind}_{k + 1}", "opt4store", drop, False, None)
    for k in range(DROP_LAST_PAIRS)
    for kind, drop in (("no_drop_last", False), ("drop_last", True))) + (
    ("no_drop_last", "torch", False, False, None),
    ("drop_last", "torch", True, False, None),
    ("wrapper", "torch", False, True, None),
    ("planned_0_workers", "torch", False, False, 0))


def drop_last_ratios(un, times):
    """Per pair: times(with drop_last) / times(without), opt4store.DataLoader."""
    return [times(un[f"opt4store_drop_last_{k + 1}"]["epoch_times"]) /
            times(un[f"opt4store_no_drop_last_{k + 1}"]["epoch_times"])
            for k in range(DROP_LAST_PAIRS)]


def unread_positions(jpeg, store_dir, decoded, workers, epochs, reference):
    """With and without drop_last (whose tail the store must pass, and
    opt4store.DataLoader loads), by opt4store.DataLoader and by torch's
    DataLoader over a CachedDataset (its __getitems__), as users run them;
    and through a wrapper Dataset in the workers (reads that lost their
    position) against the plan's own reads with 0 workers. Source loads and
    epoch times per run."""
    check = Checker(reference)
    runs = {}
    for name, kind, drop_last, wrap, run_workers in UNREAD_RUNS:
        run_workers = workers if run_workers is None else run_workers
        store = fresh_store(store_dir, decoded)
        shuffle = torch.utils.data.RandomSampler(jpeg,
                                                 generator=torch.Generator().manual_seed(SEED))
        sampler = opt4store.PlannedSampler(shuffle, epochs=epochs)
        ds = opt4store.CachedDataset(WithIndex(jpeg), store, sampler)
        times, loads = [], []
        for _ in range(epochs):
            make = opt4store.DataLoader if kind == "opt4store" else torch.utils.data.DataLoader
            loader = make(Wrapper(ds) if wrap else ds, sampler=sampler, batch_size=BATCH,
                          drop_last=drop_last, num_workers=run_workers)
            times.append(epoch(loader, check))
            # Per epoch: under torch's DataLoader, drop_last leaves epoch 1's
            # tail unread, so epoch 2 decodes those items for the first time.
            loads.append(store.stats()["source_loads"] - sum(loads))
        st = store.stats()
        store.close()
        runs[name] = {"loader": kind, "drop_last": drop_last, "epoch_times": times,
                      "source_loads": st["source_loads"],
                      "source_loads_per_epoch": loads,
                      "expect_timeouts": st["expect_timeouts"], "drift": st["drift"],
                      "position": st["position"]}
    runs["wrong"] = check.wrong
    runs["drop_last_ratios"] = drop_last_ratios(runs, later)
    runs["drop_last_ratios_epoch_3"] = drop_last_ratios(runs, lambda t: t[-1])
    return runs


# ---- read_into against memcpy


def read_into_bandwidth(store_dir, rounds):
    """GB/s of Store.read_into of 64 RAM hits of 150 KiB into a batch tensor,
    and of torch's copy_ of the same bytes (a memcpy), in this process."""
    n, item = 64, 150 * 1024
    values = [torch.randint(0, 255, (item,), dtype=torch.uint8,
                            generator=torch.Generator().manual_seed(i)) for i in range(n)]
    store = opt4store.Store(None, ram=n * item * 2, disk=0)
    ds = opt4store.CachedDataset(InMemory(values), store)
    for i in range(n):
        ds[i]
    meta, _, payload_bytes = opt4store._batch_layout.encode(values[0])
    out = torch.empty((n, item), dtype=torch.uint8)
    positions = [opt4store.NO_POSITION] * n
    indices = list(range(n))
    rows = list(range(n))
    source = torch.stack(values)
    best_store = best_copy = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        codes = store.read_into(positions, indices, rows, meta, payload_bytes, [0], [out])
        best_store = min(best_store, time.perf_counter() - t0)
        t0 = time.perf_counter()
        out.copy_(source)
        best_copy = min(best_copy, time.perf_counter() - t0)
    ok = bool((codes == 0).all()) and torch.equal(out, source)
    store.read_into(positions, indices, rows, meta, payload_bytes, [0], [out])
    ok = ok and torch.equal(out, source)
    store.close()
    gb = n * item / 1e9
    return {"store_gbps": gb / best_store, "memcpy_gbps": gb / best_copy,
            "ratio": best_copy / best_store, "items": n, "item_bytes": item, "correct": ok}


def later(times):
    rest = times[1:]
    return sum(rest) / len(rest)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", default="/var/tmp/opt4store-loader")
    parser.add_argument("--json", default=None)
    parser.add_argument("--restart-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.restart_child:
        restart_child(json.loads(args.restart_child))
        return 0
    torch.set_num_threads(1)
    n = args.images or (96 if args.quick else 400)
    epochs = 3
    workers = args.workers
    here = os.path.dirname(os.path.abspath(__file__))
    json_path = args.json or os.path.join(here, "results", "tmp" if args.quick else "",
                                          "loader.json")
    jpeg = image_set(args.dir, n)
    decoded = n * 3 * OUT * OUT
    reference = reference_for(jpeg)
    store_dir = os.path.join(args.dir, "store")
    machine = machine_info()
    settings = {"images": n, "jpeg_side": 512, "sample": f"(uint8 3x{OUT}x{OUT}, int index)",
                "decoded_bytes": decoded, "ram_ratio": RAM_RATIO, "disk_bytes": decoded * 2,
                "batch": BATCH, "workers": workers, "epochs": epochs,
                "new_loader_each_epoch": True, "shuffle_seed": SEED,
                "restart_seed": RESTART_SEED, "mode": "quick" if args.quick else "full"}
    print(f"opt4store loader_bench: {n} JPEGs -> 3x{OUT}x{OUT}, batch {BATCH}, {workers} "
          f"workers for every loader, RAM {RAM_RATIO:.0%} + disk, {epochs} epochs + restart; "
          f"{machine['cores']} cores, load {machine['load'][0]:.1f}", flush=True)

    results = {}
    bad = 0
    for name in LOADERS:
        r = run_loader(name, jpeg, store_dir, decoded, workers, epochs, reference)
        results[name] = r
        bad += r["wrong"]
        print(f"  {name:<13} epochs " + " ".join(f"{t:6.2f}" for t in r["epoch_times"]) +
              f"  restart {r['restart_time']:6.2f} s (first batch "
              f"{r['restart_first_batch'] * 1e3:.0f} ms)  checked {r['checked']}, "
              f"wrong {r['wrong']}", flush=True)
    e1 = epoch1_pairs(jpeg, store_dir, decoded, workers, reference)
    bad += e1["wrong"]
    print("  epoch 1, opt4store / no cache, per pair: " + "; ".join(
        f"{p['ratio']:.2f} ({p['opt4store']:.2f} / {p['no_cache']:.2f} s, {p['first']} first)"
        for p in e1["pairs"]), flush=True)
    ram = all_in_ram(jpeg, store_dir, decoded, workers, epochs, reference)
    bad += ram["wrong"]
    print("  all in RAM: opt4store epochs " + " ".join(f"{t:.3f}" for t in ram["opt4store"]) +
          f"; ideal stack {ram['ideal_stack']:.3f}, copy {ram['ideal_copy']:.3f}; torch over a "
          f"list " + " ".join(f"{t:.3f}" for t in ram["list_loader"]) +
          f"; worker starts in cached epochs {ram['worker_starts_cached']}; pairs (list / "
          f"opt4store) " + " ".join(f"{r:.1f}" for r in ram["list_ratios"]), flush=True)
    tr = with_transform(jpeg, store_dir, decoded, workers, epochs, reference)
    bad += tr["wrong"]
    print("  flip + float: no cache " + " ".join(f"{t:.2f}" for t in tr["no_cache"]) +
          "; opt4store " + " ".join(f"{t:.2f}" for t in tr["opt4store"]), flush=True)
    un = unread_positions(jpeg, store_dir, decoded, workers, epochs, reference)
    bad += un["wrong"]
    print("  unread positions (opt4store_*: opt4store.DataLoader; else torch's DataLoader over "
          "a CachedDataset): " + "; ".join(
              f"{k} " + " ".join(f"{t:.2f}" for t in un[k]["epoch_times"]) +
              f" (source loads per epoch {un[k]['source_loads_per_epoch']}, expect timeouts "
              f"{un[k]['expect_timeouts']})" for k, *_ in UNREAD_RUNS), flush=True)
    print("  drop_last / without, opt4store.DataLoader, per pair: epochs 2-3 " +
          " ".join(f"{r:.2f}" for r in un["drop_last_ratios"]) + "; epoch 3 " +
          " ".join(f"{r:.2f}" for r in un["drop_last_ratios_epoch_3"]), flush=True)
    bw = read_into_bandwidth(store_dir, 5 if args.quick else 30)
    bad += not bw["correct"]
    print(f"  read_into of 64 x 150 KiB RAM hits: {bw['store_gbps']:.1f} GB/s, copy_ "
          f"{bw['memcpy_gbps']:.1f} GB/s ({bw['ratio']:.0%})", flush=True)
    shutil.rmtree(store_dir, ignore_errors=True)

    base = results["no_cache"]["epoch_times"]
    ours = results["opt4store"]["epoch_times"]
    ideal = min(ram["ideal_stack"], ram["ideal_copy"])
    goals = [
        ("cached epochs 2-3 vs no cache", later(base) / later(ours), ">=", 10.0),
        ("restarted epoch vs no cache", later(base) / results["opt4store"]["restart_time"],
         ">=", 8.0),
        (f"epoch 1 / no cache (median of {EPOCH1_PAIRS} pairs)",
         statistics.median(e1["ratios"]), "<=", 1.0),
        ("epoch 1 / no cache, the loaders' runs above", ours[0] / base[0], "info", None),
        ("all in RAM: cached epoch / ideal", later(ram["opt4store"]) / ideal, "<=", 1.2),
        ("all in RAM: worker starts in cached epochs", ram["worker_starts_cached"], "<=", 0),
        (f"all in RAM: vs torch over an in-memory list (median of {ALL_IN_RAM_PAIRS} pairs)",
         statistics.median(ram["list_ratios"]), ">=", 10.0),
        ("flip + float: cached epochs 2-3 vs no cache", later(tr["no_cache"]) /
         later(tr["opt4store"]), ">=", 4.0),
        ("read_into / memcpy bandwidth", bw["ratio"], ">=", 0.8),
        (f"drop_last: cached epochs 2-3 / without drop_last (median of {DROP_LAST_PAIRS})",
         statistics.median(un["drop_last_ratios"]), "<=", 1.1),
        ("drop_last: epoch 3 alone / without drop_last",
         statistics.median(un["drop_last_ratios_epoch_3"]), "info", None),
        ("torch's DataLoader, drop_last: epochs 2-3 / without",
         later(un["drop_last"]["epoch_times"]) / later(un["no_drop_last"]["epoch_times"]),
         "info", None),
        ("wrapper in workers: loads / planned, 0 workers",
         un["wrapper"]["source_loads"] / un["planned_0_workers"]["source_loads"], "<=", 1.01),
        ("peak RAM tier bytes / ram= (opt4store, 3 epochs)",
         results["opt4store"]["stats"]["ram_bytes_peak"] / int(decoded * RAM_RATIO), "<=", 1.0),
        ("torch_cached (old path) epochs 2-3 vs no cache",
         later(base) / later(results["torch_cached"]["epoch_times"]), "info", None),
    ]
    print()
    for what, value, op, goal in goals:
        if op == "info":
            print(f"  {what:<48} {value:7.2f}")
            continue
        met = value >= goal if op == ">=" else value <= goal
        print(f"  {what:<48} {value:7.2f}  goal {op} {goal:g}" + ("" if met else "  MISSED"))
    out = {"machine": machine, "settings": settings, "loaders": results, "epoch_1": e1,
           "all_in_ram": ram,
           "transform": tr, "unread_positions": un, "read_into": bw,
           "goals": [{"what": w, "value": v, "op": o, "goal": g} for w, v, o, g in goals]}
    os.makedirs(os.path.dirname(json_path), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nwrote {json_path}; wrong samples: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
