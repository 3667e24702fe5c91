#!/usr/bin/env python3
"""A cluster host's plan at ImageNet scale (issue 16): what one host's owner
holds and takes to build its HostPlan (Store(..., shared="cluster") does it
at binding), and the readers' part it writes to /dev/shm.

    PYTHONPATH=build/python /usr/bin/python3 bench/host_plan_bench.py \\
        [--n 1281167] [--hosts 8] [--local-world 1] [--epochs 10] [--json FILE]

The orders are a torch DistributedSampler's (shuffle, seed 0) over n items
for hosts x local_world ranks, drawn an epoch at a time from its seed as
the store draws them (_cluster_plan.rank_orders); host 0's plan is built.
Measured in this process, from just before the build:
  build_s, build_cpu_s  wall and CPU seconds of HostPlan(...)
  peak_mib              the peak resident set (VmHWM, reset through
                        /proc/self/clear_refs) minus the RSS before
  held_mib              the RSS after the build, minus the RSS before (the
                        plan kept, and the two epochs of orders it caches)
  bytes_per_read        peak and held over the reads of the whole cluster
                        (n x epochs, each rank's reads of an epoch counted)
  readers_mib           the readers' files in /dev/shm (own positions, the
                        arrivals' reads, items, homes and epochs) and the
                        state words, as create_host_files writes them
  heap_held_mib,        the process's private memory (RssAnon) after the
  heap_mapped_mib       build, minus before; and again once the plan reads
                        the arrays the files hold through them (use_mapped,
                        as a store's owner does after writing them)
The engine's own plan (a 32-bit id per position, tables per store id) comes
on top in the store and is not measured here.
"""

import argparse
import gc
import json
import os
import platform
import tempfile
import time

import torch.utils.data

from opt4store._cluster_plan import HostPlan, rank_orders
from opt4store._cluster_reader import create_host_files, read_reader_plan
from plan_scale_bench import reset_peak_rss, rss_kib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_281_167)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--local-world", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--window", type=int, default=2, help="peer_window")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()

    world = args.hosts * args.local_world
    sampler = torch.utils.data.DistributedSampler(range(args.n), num_replicas=world, rank=0,
                                                  shuffle=True, seed=0)
    orders = rank_orders(sampler, world, args.epochs, len(sampler))
    before, anon_before = rss_kib(), rss_kib("RssAnon")
    peak_reset = reset_peak_rss()
    c0, t0 = time.process_time(), time.perf_counter()
    plan = HostPlan(orders, 0, args.hosts, args.local_world, args.window, args.n)
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak_kib, held_kib = rss_kib("VmHWM") - before, rss_kib() - before
    heap_held_kib = rss_kib("RssAnon") - anon_before
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        path = os.path.join(shm, "state")
        state = create_host_files(path, plan, len(sampler), args.hosts)
        readers = sum(os.path.getsize(os.path.join(shm, f)) for f in os.listdir(shm))
        mapped = read_reader_plan(path)
        plan.use_mapped(mapped["own"], mapped["arrival_reads"], mapped["arrival_items"])
        gc.collect()
        heap_mapped_kib = rss_kib("RssAnon") - anon_before
        state.remove()
    cluster_reads = world * len(sampler) * args.epochs
    out = {
        "n": args.n, "hosts": args.hosts, "local_world": args.local_world,
        "epochs": args.epochs, "window": args.window, "cluster_reads": cluster_reads,
        "positions": len(plan), "arrivals": len(plan.arrivals[0]),
        "build_s": round(build_s, 2), "build_cpu_s": round(build_cpu_s, 2),
        "peak_mib": round(peak_kib / 1024, 1) if peak_reset else None,
        "held_mib": round(held_kib / 1024, 1),
        "peak_bytes_per_read": round(peak_kib * 1024 / cluster_reads, 1) if peak_reset else None,
        "held_bytes_per_read": round(held_kib * 1024 / cluster_reads, 1),
        "readers_mib": round(readers / 2**20, 1),
        "heap_held_mib": round(heap_held_kib / 1024, 1),
        "heap_mapped_mib": round(heap_mapped_kib / 1024, 1),
        "readers_bytes_per_own_read": round(readers / (args.local_world * len(sampler)
                                                       * args.epochs), 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": os.getloadavg()[0],
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
    for key, value in out.items():
        print(f"{key:28s} {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
