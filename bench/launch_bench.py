#!/usr/bin/env python3
"""What loading costs a launch-bound training step, on the loop's own
thread and on a background thread (issue 17), measured on the CPU.

A training step of a small model at a small batch on a fast GPU is bound by
the host: the Python thread launching its kernels, each torch call dropping
the GIL and taking it back (bench/gpu_bench.py's resnet50 step of 16 images
took 16-28 ms on an H200, whose arithmetic for it is a few ms). Loading done
on a background thread (opt4store.to_device, opt4store.DataLoader(device=))
is hidden from such a step only while it does not hold the GIL. This
benchmark measures that on any machine, with no GPU: the step is STEP_MS of
tiny torch calls on the CPU (calibrated here, one torch thread), each
dropping and taking back the GIL as a kernel launch does, then --wait-ms
(default 0) with the GIL released, as a step that waits for its GPU.

Loaders, 400 items of 3x256x256 uint8 with their index, batch 16, 0
workers; the first two over a store holding every item in RAM (every read a
hit), the third with no cache, as an epoch that decodes:
  torch     torch's DataLoader over a CachedDataset
  native    opt4store.DataLoader
  decoding  torch's DataLoader over the items, each read first doing
            --decode-ms (default 1) of torch arithmetic, which drops the GIL
            as a JPEG decode does
each run "inline" (the loop calls next() itself), "thread" (the loader
always advanced by the background thread that opt4store.to_device uses,
with no copy to make here, up to 2 batches ahead) and "paced" (to_device's
default: each batch staged in the loop's thread or on that thread by the
pace rule, one pace per loader kept across rounds, as a DeviceLoader keeps
its own; "on_thread" counts its batches staged on the thread, "trials" the
rule's trials of the other place). Per round,
for each of the nine, one pass of the floor (the same steps with no
loading), then one epoch; each epoch is set against that pass. Also each
loader's epoch alone, with no step. Reported: the median and the range of
the ratios over ROUNDS, and the loop's wait in next().

A run for each --wait-ms (default 0 and 16: all launches, and a step that
waits as long as it launches). The exit status is 1 if a read after the
first epoch missed (the store must serve every one).

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/launch_bench.py
       [--quick] [--rounds R] [--step-ms MS] [--wait-ms MS,MS] [--decode-ms MS]
       [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.utils.data

import opt4store
from opt4store.device import _Pace, _paced

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_bench import machine_info  # noqa: E402

ITEMS, BATCH, SIDE, SEED = 400, 16, 256, 1
LOADERS, PLACES = ("torch", "native", "decoding"), ("inline", "thread", "paced")


class Items(torch.utils.data.Dataset):
    """Synthetic decoded samples with their index, as gpu_bench's values."""

    def __len__(self):
        return ITEMS

    def __getitem__(self, i):
        return torch.full((3, SIDE, SIDE), i % 251, dtype=torch.uint8), i


class Decoding(torch.utils.data.Dataset):
    """Items whose every read first spends decode_ms in torch arithmetic
    with the GIL released (calibrated here, one torch thread)."""

    def __init__(self, decode_ms):
        self.items = Items()
        self.m = torch.randn(96, 96)
        self.calls = 100
        t0 = time.perf_counter()
        self.work()
        self.calls = max(1, int(decode_ms / 1e3 / ((time.perf_counter() - t0) / 100)))

    def work(self):
        x = self.m
        for _ in range(self.calls):
            x = torch.mm(x, self.m).clamp_(-1, 1)
        return x

    def __len__(self):
        return ITEMS

    def __getitem__(self, i):
        self.work()
        return self.items[i]


class Step:
    """A step of `calls` tiny torch calls (host-bound, as a kernel launch
    loop), then a wait of wait_ms with the GIL released (as a step's
    synchronisation with the GPU, GradScaler's .item() say)."""

    def __init__(self, step_ms, wait_ms):
        self.a, self.b = torch.ones(8), torch.ones(8)
        self.wait_s = 0.0
        self.calls = 1000
        t0 = time.perf_counter()
        for _ in range(5):
            self()
        per_call = (time.perf_counter() - t0) / (5 * self.calls)
        self.calls = max(1, int(step_ms / 1e3 / per_call))
        self.wait_s = wait_ms / 1e3

    def __call__(self):
        x = self.a
        for _ in range(self.calls):
            x = x.add(self.b)
        if self.wait_s:
            time.sleep(self.wait_s)
        return x


def floor(step, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t0


def epoch(batches, step):
    """(seconds, seconds in next(), batches) of one epoch of steps over batches."""
    t0 = time.perf_counter()
    waited = 0.0
    count = 0
    it = iter(batches)
    while True:
        w0 = time.perf_counter()
        batch = next(it, None)
        waited += time.perf_counter() - w0
        if batch is None:
            return time.perf_counter() - t0, waited, count
        count += 1
        step()


def alone(loader):
    t0 = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t0


def measure(loaders, step, rounds):
    """Per loader and place, each epoch over its floor pass and its wait in
    next(); per loader, its epochs alone."""
    steps = ITEMS // BATCH
    ratios = {f"{n}/{p}": [] for n in LOADERS for p in PLACES}
    waits = {k: [] for k in ratios}
    batches_seen = dict.fromkeys(ratios, 0)
    alone_s = {n: [] for n in LOADERS}
    paces = {n: _Pace() for n in LOADERS}
    for _ in range(rounds):
        for name in LOADERS:
            alone_s[name].append(alone(loaders[name]))
            for place in PLACES:
                f = floor(step, steps)
                pace = paces[name] if place == "paced" else _Pace(rule=False)
                batches = (loaders[name] if place == "inline" else
                           _paced(iter(loaders[name]), lambda b: b, 2, pace))
                seconds, waited, count = epoch(batches, step)
                ratios[f"{name}/{place}"].append(seconds / f)
                waits[f"{name}/{place}"].append(waited)
                batches_seen[f"{name}/{place}"] += count
    return {"calls_a_step": step.calls, "epoch_vs_floor": ratios, "wait_s": waits,
            "batches": batches_seen, "loader_alone_s": alone_s,
            "on_thread": {f"{n}/paced": paces[n].batches_on_thread for n in LOADERS},
            "trials": {f"{n}/paced": paces[n].trials for n in LOADERS}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, steps of 4 ms")
    parser.add_argument("--rounds", type=int, default=None, help="default 12")
    parser.add_argument("--step-ms", type=float, default=None, help="of calls; default 16")
    parser.add_argument("--wait-ms", default="0,16",
                        help="comma-separated: a run per GIL-free wait after the calls")
    parser.add_argument("--decode-ms", type=float, default=1.0,
                        help="GIL-free work per read of the decoding loader; default 1")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 12)
    step_ms = args.step_ms or (4.0 if args.quick else 16.0)
    wait_ms = [float(w) for w in args.wait_ms.split(",")]
    torch.set_num_threads(1)
    cached = [name for name in LOADERS if name != "decoding"]  # the planned sampler's loaders
    epochs = 2 + len(wait_ms) * rounds * len(cached) * (1 + len(PLACES))  # alone, each place
    store = opt4store.Store(None, ram=ITEMS * 3 * SIDE * SIDE * 2, policy="opt")
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(
        Items(), generator=torch.Generator().manual_seed(SEED)), epochs=epochs)
    data = opt4store.CachedDataset(Items(), store, sampler)
    loaders = {"torch": torch.utils.data.DataLoader(data, sampler=sampler, batch_size=BATCH),
               "native": opt4store.DataLoader(data, sampler=sampler, batch_size=BATCH),
               "decoding": torch.utils.data.DataLoader(
                   Decoding(args.decode_ms), sampler=torch.utils.data.RandomSampler(
                       Items(), generator=torch.Generator().manual_seed(SEED)),
                   batch_size=BATCH)}
    alone(loaders["torch"])  # fills the store
    alone(loaders["native"])  # lays out its batches
    runs = {}
    for w in wait_ms:
        r = runs["%g" % w] = measure(loaders, Step(step_ms, w), rounds)
        print(f"steps of {r['calls_a_step']} calls ({step_ms:g} ms), then a wait of {w:g} ms; "
              f"{ITEMS // BATCH} steps an epoch, {rounds} rounds")
        for name in LOADERS:
            print(f"  {name:7s} alone: {statistics.median(r['loader_alone_s'][name]):.4f} s "
                  "an epoch (median)")
        for key, vs in r["epoch_vs_floor"].items():
            waited = statistics.median(r["wait_s"][key])
            print(f"  {key:14s} epoch / floor: median {statistics.median(vs):.3f} (range "
                  f"{min(vs):.2f}-{max(vs):.2f}); waited {waited:.4f} s"
                  + (f"; on thread {r['on_thread'][key]} of {r['batches'][key]}, trials "
                     f"{r['trials'][key]}" if key in r["trials"] else ""))
    stats = store.stats()
    store.close()
    print(f"source loads {stats['source_loads']} of {ITEMS} (the first epoch's; "
          "every later read a hit)")
    out = {"machine": machine_info(),
           "settings": {"items": ITEMS, "batch": BATCH, "sample": [3, SIDE, SIDE],
                        "decode_ms": args.decode_ms,
                        "step_ms": step_ms, "wait_ms": wait_ms, "steps_an_epoch": ITEMS // BATCH,
                        "rounds": rounds, "workers": 0, "depth": 2,
                        "mode": "quick" if args.quick else "full"},
           "runs": runs, "source_loads": stats["source_loads"]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if stats["source_loads"] == ITEMS else 1


if __name__ == "__main__":
    sys.exit(main())
