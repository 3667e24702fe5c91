#!/usr/bin/env python3
"""Looks for samples loaded twice: many short runs of a cached dataset in
random settings, each load of each id logged by the source, any id loaded
more than once reported with the positions that read it.

With the disk tier holding everything, a run must load each id it reads
once, whatever the loader does; a second load is a race in the store's
read protocol (a reader that should have waited for another's Put, or read
the disk, and loaded instead). The races it finds need timing: run it
beside CPU hogs (--hogs) as well as on a quiet machine. Found this way: an
item that drop_last left unread, read twice at the next epoch's start and
loaded by two workers (2026-11-28, 1 run in 250 beside two hogs; fixed in
9d77998, tests/store_expect_test.cc).

Settings drawn per run: torch's DataLoader over a CachedDataset or
opt4store.DataLoader; 1-3 workers, persistent or not, a new loader per
epoch or one; draws with or without replacement; drop_last; a transform;
batch 4, 8 or 16; RAM for a half to a fifth of the items; 64, 128 or 200
items of 1 KiB; 3 epochs.

  bench/load_soak.py [--runs N] [--seed S] [--hogs K]

Exit status 1 when any run loaded an id twice, hit an expect timeout or
failed. Each run prints one line: its settings, then the extra loads.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

EPOCHS = 3


def child(args):
    """One run, in this process: prints a JSON line of what happened."""
    import torch
    import torch.utils.data

    import opt4store

    s = json.loads(args.child)
    log = os.path.join(args.dir, "loads")

    def plus_one(value):
        return value + 1

    class Source(torch.utils.data.Dataset):
        def __len__(self):
            return s["items"]

        def __getitem__(self, i):
            with open(log, "a") as f:  # one short write: lines do not interleave
                f.write(f"{os.getpid()} {int(i)}\n")
            return torch.rand(256, generator=torch.Generator().manual_seed(1000 + int(i)))

    store = opt4store.Store(os.path.join(args.dir, "store"), ram_items=s["items"] // s["ram_part"],
                            disk="32MiB")
    draws = torch.utils.data.RandomSampler(range(s["items"]), replacement=s["replacement"],
                                           generator=torch.Generator().manual_seed(s["seed"]))
    sampler = opt4store.PlannedSampler(draws, epochs=EPOCHS)
    data = opt4store.CachedDataset(Source(), store, sampler,
                                   transform=plus_one if s["transform"] else None)
    kind = opt4store.DataLoader if s["loader"] == "native" else torch.utils.data.DataLoader

    def make():
        return kind(data, sampler=sampler, batch_size=s["batch"], num_workers=s["workers"],
                    persistent_workers=s["persistent"], drop_last=s["drop_last"])

    loader = make()
    for epoch in range(EPOCHS):
        if s["new_loader"] and epoch:
            loader = make()
        for _ in loader:
            pass
    plan = [int(i) for i in sampler.plan]
    stats = store.stats()
    del loader
    store.close()
    loads = {}
    with open(log) as f:
        for line in f:
            pid, i = line.split()
            loads.setdefault(int(i), []).append(int(pid))
    twice = {i: pids for i, pids in loads.items() if len(pids) > 1}
    print(json.dumps({
        "extra": sum(len(p) - 1 for p in twice.values()),
        "source_loads": stats["source_loads"], "expect_timeouts": stats["expect_timeouts"],
        "twice": [{"id": i, "pids": pids, "positions": [p for p, x in enumerate(plan) if x == i]}
                  for i, pids in sorted(twice.items())[:4]]}))


def draw(rng):
    return {"loader": rng.choice(["torch", "native"]), "workers": rng.choice([1, 2, 3]),
            "persistent": rng.random() < 0.5, "new_loader": rng.random() < 0.5,
            "replacement": rng.random() < 0.5, "drop_last": rng.random() < 0.5,
            "transform": rng.random() < 0.5, "batch": rng.choice([4, 8, 16]),
            "ram_part": rng.choice([2, 3, 5]), "items": rng.choice([64, 128, 200]),
            "seed": rng.randrange(1000)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hogs", type=int, default=0, help="busy-looping processes beside the runs")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    rng = random.Random(args.seed)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    bad = 0
    try:
        for k in range(args.runs):
            settings = draw(rng)
            work = tempfile.mkdtemp(prefix="opt4store-soak-")
            t0 = time.monotonic()
            try:
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "--dir", work,
                                    "--child", json.dumps(settings)],
                                   capture_output=True, text=True, timeout=120)
                lines = p.stdout.strip().splitlines()
                out = json.loads(lines[-1]) if p.returncode == 0 and lines else None
            except subprocess.TimeoutExpired:
                p, out = None, None
            finally:
                shutil.rmtree(work, ignore_errors=True)
            ok = out is not None and out["extra"] == 0 and out["expect_timeouts"] == 0
            bad += not ok
            what = (f"extra {out['extra']}, source loads {out['source_loads']}, expect timeouts "
                    f"{out['expect_timeouts']}" if out else
                    "timed out" if p is None else f"exit {p.returncode}: {p.stderr[-400:]}")
            print(f"{k} {json.dumps(settings)} {time.monotonic() - t0:.1f} s: {what}"
                  + ("" if ok or not out else f"  <-- {out['twice']}"), flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(f"{bad} of {args.runs} runs loaded an id twice, timed out a wait or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
