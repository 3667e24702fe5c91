#!/usr/bin/env python3
"""Python-side costs of opt4store (issue 4's speed figures).

1. Per-read overhead. A RAM hit through CachedDataset.__getitem__ for a
   3x64x64 uint8 sample, against the plain alternative: a dict lookup that
   returns a copy (clone) of the same tensor. Both loops run over the same
   indices in the same process, interleaved round by round; each figure is
   the median over rounds of (loop time / reads). Goal: at most 1.5 us more
   than the dict.
2. Samples/s of a RAM-hit epoch through a DataLoader (batch 64, default
   collate) with 0 and 4 workers: CachedDataset with every item resident,
   against the same loader over a plain in-memory dataset (a list of
   tensors). Each is the median of a few epochs after one warm-up epoch.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/python_bench.py
       [--quick] [--json FILE]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.utils.data

import opt4store

SHAPE = (3, 64, 64)


class TensorList(torch.utils.data.Dataset):
    """The source: precomputed uint8 tensors (no decode cost)."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.items = [torch.randint(0, 256, SHAPE, generator=g, dtype=torch.uint8)
                      for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def per_read(n, rounds):
    source = TensorList(n)
    store = opt4store.Store(None, ram="512MiB", disk=0)
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(n)),
                                       epochs=rounds + 1)
    ds = opt4store.CachedDataset(source, store, sampler)
    for index in iter(sampler):  # epoch 0 loads everything
        ds[index]
    cache = {i: source.items[i] for i in range(n)}
    dict_ns, store_ns = [], []
    for _ in range(rounds):
        indices = list(iter(sampler))
        t0 = time.perf_counter_ns()
        for i in range(n):
            cache[i].clone()
        t1 = time.perf_counter_ns()
        for index in indices:
            ds[index]
        t2 = time.perf_counter_ns()
        dict_ns.append((t1 - t0) / n)
        store_ns.append((t2 - t1) / n)
    stats = store.stats()
    store.close()
    assert stats["source_loads"] == n, stats
    d, s = statistics.median(dict_ns), statistics.median(store_ns)
    return {"reads_per_round": n, "rounds": rounds, "dict_clone_us": d / 1e3,
            "store_hit_us": s / 1e3, "overhead_us": (s - d) / 1e3,
            "dict_clone_us_range": [min(dict_ns) / 1e3, max(dict_ns) / 1e3],
            "store_hit_us_range": [min(store_ns) / 1e3, max(store_ns) / 1e3],
            "hits_ram": stats["hits_ram"], "accesses": stats["accesses"]}


def epoch_rate(loader, epochs):
    times = []
    for _ in range(epochs + 1):
        t0 = time.perf_counter()
        reads = 0
        for batch in loader:
            reads += len(batch)
        times.append(time.perf_counter() - t0)
    times = times[1:]  # the first epoch warms up (and, for the store, loads)
    return reads / statistics.median(times), [reads / t for t in times]


def loader_rates(n, epochs, workers):
    source = TensorList(n)
    out = {}
    plain = torch.utils.data.DataLoader(source, batch_size=64, num_workers=workers,
                                        persistent_workers=workers > 0,
                                        sampler=torch.utils.data.RandomSampler(source))
    out["plain_samples_per_s"], out["plain_runs"] = epoch_rate(plain, epochs)
    store = opt4store.Store(None, ram="512MiB", disk=0)
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(source),
                                       epochs=epochs + 1)
    ds = opt4store.CachedDataset(source, store, sampler)
    cached = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers,
                                         persistent_workers=workers > 0, sampler=sampler)
    out["store_samples_per_s"], out["store_runs"] = epoch_rate(cached, epochs)
    stats = store.stats()
    store.close()
    out["store_hit_rate_after_epoch_1"] = (stats["hits_ram"]) / max(1, stats["accesses"] - n)
    out["source_loads"] = stats["source_loads"]
    out["ratio_store_to_plain"] = out["store_samples_per_s"] / out["plain_samples_per_s"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    n = 2000 if args.quick else 20000
    rounds = 3 if args.quick else 9
    epochs = 2 if args.quick else 4

    result = {"machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
              "load_average": os.getloadavg(), "torch": torch.__version__,
              "python": platform.python_version()}
    print(f"opt4store python_bench ({'quick' if args.quick else 'full'}), torch {torch.__version__},"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    r = per_read(n, rounds)
    result["per_read"] = r
    print(f"per read, 3x64x64 uint8, median of {rounds} rounds of {n} reads:")
    print(f"  dict lookup + clone      {r['dict_clone_us']:6.2f} us")
    print(f"  CachedDataset RAM hit    {r['store_hit_us']:6.2f} us")
    verdict = "met" if r["overhead_us"] <= 1.5 else "MISSED"
    print(f"  overhead                 {r['overhead_us']:+6.2f} us  (goal <= 1.5 us: {verdict})")
    result["loader"] = {}
    for workers in (0, 4):
        lr = loader_rates(n, epochs, workers)
        result["loader"][str(workers)] = lr
        print(f"RAM-hit epoch, batch 64, {workers} workers: store {lr['store_samples_per_s']:9.0f}"
              f" samples/s, plain in-memory {lr['plain_samples_per_s']:9.0f} samples/s"
              f" (ratio {lr['ratio_store_to_plain']:.2f}), hit rate after epoch 1"
              f" {lr['store_hit_rate_after_epoch_1']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
