#!/usr/bin/env python3
"""How long a Put waits while the RAM tier grows into /dev/shm.

The RAM tier reserves /dev/shm a step at a time (128 MiB; posix_fallocate,
about 35 ms a step on the 2-core machine). The store's planner thread
reserves the next step ahead of the inserts once less than half a step is
free (RamTier::ReserveAhead); an insert that finds none reserved does it
itself, holding the owner's mutex, and its Put waits for it.

Setup: a store with ram="1GiB" and no disk tier, ITEMS values of 192 KiB
put from the owner, one every PAUSE_MS (a decode's pace, roughly): 563 MiB,
so the tier grows by four steps past its first. Prints the total time spent
in Put, the slowest Put, the 99th percentile, and how many Puts took over
10 ms. There is no baseline to divide by: the slow Puts are the figure
(run it on another build to compare).

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/ram_growth_bench.py
       [--items N] [--pause-ms MS] [--json FILE]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opt4store  # noqa: E402
from e2e_bench import machine_info  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--pause-ms", type=float, default=0.5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="opt4store-ram-growth-")
    try:
        store = opt4store.Store(os.path.join(work, "store"), ram="1GiB", disk=0)
        store.bind(args.items)
        value = torch.zeros(192 * 1024, dtype=torch.uint8)
        waits = []
        for i in range(args.items):
            t0 = time.perf_counter()
            store.put(opt4store.NO_POSITION, i, value)
            waits.append(time.perf_counter() - t0)
            time.sleep(args.pause_ms / 1e3)
        stats = store.stats()
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if stats["ram_items"] != args.items or stats["ram_insert_failures"] != 0:
        sys.exit(f"the RAM tier holds {stats['ram_items']} of {args.items} values "
                 f"({stats['ram_insert_failures']} inserts failed)")
    ordered = sorted(waits)
    result = {"machine": machine_info(), "items": args.items, "pause_ms": args.pause_ms,
              "put_s": waits, "total_s": sum(waits), "max_s": ordered[-1],
              "p99_s": ordered[int(0.99 * len(ordered))],
              "over_10ms": sum(w > 0.01 for w in waits)}
    print(f"opt4store ram_growth_bench: {args.items} Puts of 192 KiB into ram=1GiB, one every "
          f"{args.pause_ms} ms; {result['machine']['cores']} cores, "
          f"load {result['machine']['load'][0]:.1f}")
    print(f"  in Put {result['total_s']:.3f} s; slowest {1e3 * result['max_s']:.1f} ms, "
          f"p99 {1e3 * result['p99_s']:.2f} ms, {result['over_10ms']} over 10 ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
