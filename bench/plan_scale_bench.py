#!/usr/bin/env python3
"""Plans at ImageNet scale (issue 14): time to the first batch and the
plan's memory for PlannedSampler(RandomSampler(1,281,167, generator=seeded),
epochs=90) driving a Store through a CachedDataset over a trivial dataset,
and the time to append an epoch at an epoch's start.

    OPT4STORE_BUILD_DIR=build PYTHONPATH=build/python \\
        /usr/bin/python3 bench/plan_scale_bench.py [--n 1281167] [--epochs 90]

Memory, two ways, both from just before the sampler is made (the Store is
already open for the dataset, store.bind(n) without a plan, so its RAM tier
and per-id tables are not counted; what SetPlan allocates is):
  tracemalloc peak  Python's and numpy's allocations (numpy arrays that
                    torch allocated, such as a randperm's, are not traced);
  RSS peak delta    the process's peak resident set (VmHWM, reset through
                    /proc/self/clear_refs) minus its RSS before: everything,
                    the C++ plan (ring, per-id tables, pending epochs) included.
The first batch: PlannedSampler(...) + CachedDataset(...) (binds the store:
set_plan) + DataLoader(...) + next(iter(loader)), 0 workers.
"""

import argparse
import json
import os
import tempfile
import time
import tracemalloc

import numpy as np
import torch
import torch.utils.data

import opt4store


class Trivial(torch.utils.data.Dataset):
    """Index i is a one-element int64 tensor: the plan, not the data, is measured."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([int(i)])


def rss_kib(field="VmRSS"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_281_167)
    ap.add_argument("--epochs", type=int, default=90)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--appends", type=int, default=5, help="epoch starts to time")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()

    out = {"n": args.n, "epochs": args.epochs, "batch": args.batch,
           "cpus": os.cpu_count(), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        store = opt4store.Store(os.path.join(tmp, "store"), ram="64MiB", disk=0)
        dataset = Trivial(args.n)
        store.bind(args.n)  # open without a plan: the store's own tables come first
        generator = torch.Generator().manual_seed(1234)
        base = torch.utils.data.RandomSampler(range(args.n), generator=generator)

        out["load_average_at_start"] = os.getloadavg()[0]
        rss_before = rss_kib()
        peak_reset = reset_peak_rss()
        tracemalloc.start()
        c0 = time.process_time()
        t0 = time.perf_counter()
        sampler = opt4store.PlannedSampler(base, epochs=args.epochs)
        t1 = time.perf_counter()
        cached = opt4store.CachedDataset(dataset, store, sampler, spot_check=0)
        t2 = time.perf_counter()
        loader = torch.utils.data.DataLoader(cached, sampler=sampler, batch_size=args.batch)
        it = iter(loader)
        first = next(it)
        t3 = time.perf_counter()
        c3 = time.process_time()
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_peak = rss_kib("VmHWM")
        assert first.shape == (args.batch, 1)
        out.update({
            "first_batch_s": round(t3 - t0, 3),
            "first_batch_cpu_s": round(c3 - c0, 3),
            "sampler_s": round(t1 - t0, 3),
            "bind_s": round(t2 - t1, 3),
            "first_batch_after_bind_s": round(t3 - t2, 3),
            "tracemalloc_peak_mib": round(traced_peak / 2**20, 1),
            "rss_peak_delta_mib": round((rss_peak - rss_before) / 1024, 1) if peak_reset else None,
            "rss_after_first_batch_delta_mib": round((rss_kib() - rss_before) / 1024, 1),
        })
        del it

        # Epoch starts: each records the epoch two ahead and appends it to the
        # store. take_epoch() begins an epoch without reading it.
        record_s, append_s, begin_s = [], [], []
        real_append = store.append_plan

        def timed_append(ids):
            a = time.perf_counter()
            real_append(ids)
            append_s.append(time.perf_counter() - a)

        store.append_plan = timed_append
        begin_cpu_s = []
        for _ in range(args.appends):
            a, c = time.perf_counter(), time.process_time()
            sampler.take_epoch()
            begin_s.append(time.perf_counter() - a)
            begin_cpu_s.append(time.process_time() - c)
        store.append_plan = real_append
        a = time.perf_counter()
        recorder = sampler._recorder
        recorder.record()  # one more epoch's draws, on its own (not used after this)
        record_s.append(time.perf_counter() - a)
        out.update({
            "epoch_start_s": round(float(np.median(begin_s)), 4),
            "epoch_start_max_s": round(max(begin_s), 4),
            "epoch_start_cpu_s": round(float(np.median(begin_cpu_s)), 4),
            "store_append_s": round(float(np.median(append_s)), 4),
            "record_epoch_s": round(record_s[0], 4),
            "rss_after_appends_delta_mib": round((rss_kib() - rss_before) / 1024, 1),
            "epochs_held": sampler._window.held(),
        })

        # The old way, for scale: one epoch iterated as Python ints.
        old = torch.utils.data.RandomSampler(range(args.n),
                                             generator=torch.Generator().manual_seed(1))
        a = time.perf_counter()
        np.fromiter((int(i) for i in old), dtype=np.int64)
        out["iterate_one_epoch_s"] = round(time.perf_counter() - a, 3)
        out["load_average_at_end"] = os.getloadavg()[0]
        store.close()

    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
