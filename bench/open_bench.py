#!/usr/bin/env python3
"""What a restart pays before its first read: the store's open and close.

Setup: loader_bench's store without its JPEGs: ITEMS values of 3x256x256
uint8 put into a store with RAM for 30% of their bytes plus the disk tier,
then closed. Then REOPENS rounds in this process, each opening the store as
a restarted script does (opt4store.Store(path, fingerprint=...): the
settings come from its manifest) and closing it again. Each open and close
is timed on its own; the medians and ranges are printed, with the index's
log (WAL) and table files counted after the rounds, since a store whose
every open leaves one more log opens slower each time.

A second part does the same with SMALL_ITEMS values of 243 bytes (RAM 30%
+ disk again; a third as many reopens): a store whose open is mostly its
index, as an ImageNet-sized dataset's (a million entries) is.

There is no baseline to divide by: an open's time is what the restart's
first batch waits for, and loader_bench's restart row has it against no
cache's restart.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/open_bench.py
       [--items N] [--small-items M] [--reopens K] [--dir DIR] [--json FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opt4store  # noqa: E402
from e2e_bench import machine_info  # noqa: E402

FINGERPRINT = "open_bench v1"
SIDE = 256
SMALL_SIDE = 9  # 243 bytes a value


def build(path, items, side):
    """A closed store of `items` values of 3 x side x side uint8, RAM for 30%
    of their bytes and the disk tier for all of them."""
    decoded = items * 3 * side * side
    shutil.rmtree(path, ignore_errors=True)
    store = opt4store.Store(path, ram=int(decoded * 0.3), disk=decoded * 2,
                            fingerprint=FINGERPRINT)
    store.bind(items)
    g = torch.Generator().manual_seed(1)
    for i in range(items):
        store.put(opt4store.NO_POSITION, i,
                  torch.randint(0, 256, (3, side, side), dtype=torch.uint8, generator=g))
    store.close()


def reopen(path, items, reopens):
    """Opens and closes the store `reopens` times; each one's seconds."""
    opens, closes = [], []
    for _ in range(reopens):
        t0 = time.perf_counter()
        store = opt4store.Store(path, fingerprint=FINGERPRINT)
        t1 = time.perf_counter()
        held = store.stats()["disk_items"]
        t2 = time.perf_counter()
        store.close()
        closes.append(time.perf_counter() - t2)
        opens.append(t1 - t0)
        if held != items:
            sys.exit(f"the reopened store holds {held} items, not {items}")
    return opens, closes


def report(title, opens, closes):
    ms = [1e3 * t for t in opens]
    cs = [1e3 * t for t in closes]
    print(title)
    print(f"  open  median {statistics.median(ms):6.1f} ms  [{min(ms):.1f}-{max(ms):.1f}]")
    print(f"  close median {statistics.median(cs):6.1f} ms  [{min(cs):.1f}-{max(cs):.1f}]")


def index_files(path):
    names = os.listdir(os.path.join(path, "index"))
    return {"logs": sum(n.endswith(".log") for n in names),
            "tables": sum(n.endswith(".sst") for n in names)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--small-items", type=int, default=200_000)
    parser.add_argument("--reopens", type=int, default=30)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="opt4store-open-bench-")
    path = os.path.join(work, "store")
    build(path, args.items, SIDE)
    opens, closes = reopen(path, args.items, args.reopens)
    files = index_files(path)
    result = {"machine": machine_info(), "items": args.items, "reopens": args.reopens,
              "open_s": opens, "close_s": closes, "index_files": files}
    report(f"opt4store open_bench: {args.items} items of 3x{SIDE}x{SIDE} uint8, RAM 30% + disk, "
           f"{args.reopens} reopens; {result['machine']['cores']} cores, "
           f"load {result['machine']['load'][0]:.1f}", opens, closes)
    print(f"  index after the reopens: {files['logs']} log files, {files['tables']} tables")
    if args.small_items:
        small = os.path.join(work, "small")
        build(small, args.small_items, SMALL_SIDE)
        reopens = max(1, args.reopens // 3)
        opens, closes = reopen(small, args.small_items, reopens)
        result["small"] = {"items": args.small_items, "bytes": 3 * SMALL_SIDE ** 2,
                           "reopens": reopens, "open_s": opens, "close_s": closes}
        report(f"  {args.small_items} items of 3x{SMALL_SIDE}x{SMALL_SIDE} uint8, "
               f"{reopens} reopens:", opens, closes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
