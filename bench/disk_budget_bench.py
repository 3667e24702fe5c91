#!/usr/bin/env python3
"""The disk tier under a budget smaller than the dataset: how many samples a
run loads again, against the exact bound for the room the tier had.

One reader in plan order (Store.get, and Store.put on a miss), a store with
RAM for 10% of the items (ram_items, OPT) and a disk budget of 40% of the
data (--disk-fraction), --items values of 32 KiB of random bytes (LZ4 skips
them), 4 epochs, the store closed after epoch 2 and opened again (a restart:
its RAM starts empty); shuffled epochs, then draws with replacement. Per run:
source loads per epoch, disk evictions and bypasses, write amplification
(before and after the restart), and two references computed here from the same plan:

  bound      RAM under OPT with the store's capacity (emptied at the
             restart), then the reads RAM misses through an OPT cache with
             bypass that holds as many items as the disk tier held at most
             (disk_items, sampled after each epoch): the fewest loads a disk
             tier of that size allows, but for the RAM tier's staging room
             (prefetched items it holds beyond ram_items), with which the
             store can do better on small sets.
  fill once  the same RAM, then a disk that keeps the first items written
             until full and never evicts (what the tier's eviction order
             amounted to before 2026-11-29, when every Put was stored and
             the planner's ranks tied).

Every value read is checked against its source. Usage:

  bench/disk_budget_bench.py [--items N] [--disk-fraction F] [--json FILE]
"""

import argparse
import json
import sys
import tempfile

import numpy as np
import torch

import opt4store

EPOCHS = 4
RESTART = 2  # the epoch a reopened store reads first
ITEM_BYTES = 32 * 1024
NEVER = 1 << 62


def next_reads(plan, served=None):
    """For each position, the position of the same id's next read (among
    those not served, if given), or NEVER."""
    out = np.full(len(plan), NEVER, dtype=np.int64)
    last = {}
    for t in range(len(plan) - 1, -1, -1):
        i = int(plan[t])
        out[t] = last.get(i, NEVER)
        if served is None or not served[t]:
            last[i] = t
    return out


def opt_hits(plan, capacity, ranks, offered):
    """Hits of an OPT cache with bypass over the offered positions; a cached
    id's rank is updated at every position (ranks[t]: its next read that
    matters). Returns a bool array of hits."""
    cache, hits = {}, np.zeros(len(plan), dtype=bool)
    for t, i in enumerate(plan.tolist()):
        if i in cache:
            cache[i] = ranks[t]
            hits[t] = offered[t]
            continue
        if not offered[t] or capacity == 0:
            continue
        if len(cache) < capacity:
            cache[i] = ranks[t]
            continue
        victim = max(cache, key=cache.get)
        if cache[victim] > ranks[t]:
            del cache[victim]
            cache[i] = ranks[t]
    return hits


def fill_once_hits(plan, capacity, offered):
    held, hits = set(), np.zeros(len(plan), dtype=bool)
    for t, i in enumerate(plan.tolist()):
        if not offered[t]:
            continue
        if i in held:
            hits[t] = True
        elif len(held) < capacity:
            held.add(i)
    return hits


def references(plan, ram_items, disk_items, n):
    every = np.ones(len(plan), dtype=bool)
    cut = RESTART * n
    ram = np.concatenate([
        opt_hits(plan[:cut], ram_items, next_reads(plan)[:cut], every[:cut]),
        opt_hits(plan[cut:], ram_items, next_reads(plan[cut:]), every[cut:])])
    missed = ~ram
    bound = ram | opt_hits(plan, disk_items, next_reads(plan, ram), missed)
    once = ram | fill_once_hits(plan, disk_items, missed)
    def loads_per_epoch(hits):
        return [int((~hits[e * n:(e + 1) * n]).sum()) for e in range(EPOCHS)]
    return loads_per_epoch(bound), loads_per_epoch(once)


def run(n, sampler, disk_fraction):
    rng = np.random.default_rng(1)
    if sampler == "shuffle":
        epochs = [rng.permutation(n) for _ in range(EPOCHS)]
    else:
        epochs = [rng.integers(0, n, n) for _ in range(EPOCHS)]
    values = [torch.from_numpy(np.random.default_rng(i).integers(0, 256, ITEM_BYTES,
                                                                 dtype=np.uint8))
              for i in range(n)]
    loads, disk_items = [], 0

    def open_store(path, start):
        store = opt4store.Store(path, ram_items=n // 10,
                                disk=int(disk_fraction * n * ITEM_BYTES), policy="opt")
        store.bind(n)
        store.set_plan(epochs, epoch_length=n, start=start)
        return store

    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        store = open_store(d + "/store", 0)
        position = 0
        opens = []  # each open's last stats (its disk counters start at 0)
        for e, ids in enumerate(epochs):
            if e == RESTART:
                opens.append(store.stats())
                store.close()
                store = open_store(d + "/store", position)
            before = store.stats()["source_loads"]
            for i in ids.tolist():
                value = store.get(position, i)
                if value is None:
                    store.put(position, i, values[i])
                elif not torch.equal(value, values[i]):
                    raise SystemExit(f"wrong value for id {i} at position {position}")
                position += 1
            st = store.stats()
            loads.append(st["source_loads"] - before)
            disk_items = max(disk_items, st["disk_items"])
        opens.append(st)
        store.close()
    bound, once = references(np.concatenate(epochs), n // 10, disk_items, n)
    return {"sampler": sampler, "loads": loads, "bound": bound, "fill_once": once,
            "disk_items": disk_items,
            "disk_evictions": sum(o["disk_evictions"] for o in opens),
            "disk_bypasses": sum(o.get("disk_bypasses", 0) for o in opens),
            "disk_write_amplification": [round(o["disk_write_amplification"], 2)
                                         for o in opens]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--disk-fraction", type=float, default=0.4)
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []
    for sampler in ("shuffle", "replacement"):
        r = run(args.items, sampler, args.disk_fraction)
        results.append(r)
        print(f"{sampler}: loads {sum(r['loads'])} {r['loads']}, bound {sum(r['bound'])}, "
              f"fill once {sum(r['fill_once'])}; disk held {r['disk_items']} items, "
              f"evictions {r['disk_evictions']}, bypasses {r['disk_bypasses']}, "
              f"write amplification {r['disk_write_amplification']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"items": args.items, "item_bytes": ITEM_BYTES, "epochs": EPOCHS,
                       "disk_fraction": args.disk_fraction, "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
