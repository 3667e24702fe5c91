#!/usr/bin/env python3
"""Many hosts, one cache (issue 16): four hosts' stores as one cache
(Store(..., shared="cluster")) against a store per host (shared="local").

Four processes stand for four hosts on this machine (local_rank=0,
local_world_size=1 each; gloo on 127.0.0.1). Each reads 3 epochs of a
shuffling DistributedSampler over bench/demo.py's JPEGs (512x512, decoded
and resized to 3x256x256 uint8 on every source load: decode-bound),
batch 16, through a CachedDataset and torch's DataLoader (0 workers by
default), with an all_reduce per batch to keep the hosts in lockstep as
DDP's gradients do. Every host has RAM for 25% of the decoded dataset in
items (ram_items = N/4 + 2 * peer_window: the room a cluster store adds for
items in flight, given to the per-host stores too) and no disk tier.

Reported per configuration: each epoch's time (the slowest host's: the
hosts advance together), the source loads of the whole cluster (a shared
counter file), peer_hits / peer_bytes_in / peer_bytes_out, and wrong values
(each sample of CHECKED indices is compared with a fresh decode). Goal:
epochs 2-3 at least 2x faster with the cluster store.

A third run, cluster stores with RAM for 12.5% (ram_items = N/8, peer_window
--window-small), is set against one offline OPT cache over the cluster's
reads in lockstep order at the same total RAM (hosts x (N/8 + 2 x
peer_window): the room for arrivals is RAM too). Goal: source loads within
2% of it.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/cluster_bench.py
       [--images N] [--workers W] [--dir DIR] [--json FILE]
"""

import argparse
import heapq
import json
import os
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp
import torch.utils.data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_bench import image_set, machine_info  # noqa: E402

HOSTS = 4
EPOCHS = 3
BATCH = 16
SEED = 3
WINDOW = 8
CHECKED = 24


class Counted(torch.utils.data.Dataset):
    """The JPEG dataset, counting its loads in a file shared by every host."""

    def __init__(self, ds, counter_path):
        self.ds, self.counter_path = ds, counter_path

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        fd = os.open(self.counter_path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
        return self.ds[i]


def host_main(rank, cfg):
    import torch.distributed as dist
    import opt4store
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + cfg["rendezvous"], rank=rank,
                            world_size=HOSTS)
    jpeg = image_set(cfg["dir"], cfg["images"])
    n = len(jpeg)
    reference = {i: jpeg[i] for i in range(0, n, max(1, n // CHECKED))}
    dataset = Counted(jpeg, cfg["counter"])
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=HOSTS, rank=rank,
                                               shuffle=True, seed=SEED)
    sampler = opt4store.PlannedSampler(base, epochs=EPOCHS)
    ram_items = n // cfg["fraction"]
    if cfg["shared"] == "local":
        ram_items += 2 * WINDOW  # what the cluster store adds for items in flight
    store = opt4store.Store(None, ram_items=ram_items, disk=0, shared=cfg["shared"],
                            local_rank=0, local_world_size=1, peer_window=cfg["window"])
    ds = opt4store.CachedDataset(dataset, store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                         num_workers=cfg["workers"],
                                         persistent_workers=cfg["workers"] > 0)
    length = sampler.epoch_length
    times, wrong = [], 0
    for epoch in range(EPOCHS):
        dist.barrier()
        start = time.perf_counter()
        for b, batch in enumerate(loader):
            first = epoch * length + b * BATCH
            for k, i in enumerate(sampler.plan[first:first + len(batch)].tolist()):
                if i in reference and not torch.equal(batch[k], reference[i]):
                    wrong += 1
            dist.all_reduce(torch.zeros(1))
        times.append(time.perf_counter() - start)
    stats = store.stats()
    dist.barrier()
    store.close()
    slowest = torch.tensor(times)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    result = {"rank": rank, "epoch_s": slowest.tolist(), "wrong": wrong,
              "stats": {k: stats.get(k, 0) for k in
                        ("accesses", "hits_ram", "source_loads", "peer_hits", "peer_bytes_in",
                         "peer_bytes_out")}}
    with open(cfg["results"] + f".{rank}", "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def union_opt_loads(images, total_items):
    """Source loads of one offline OPT cache (Belady, with bypass) of
    total_items over every host's reads in lockstep order (step i: every
    rank's i-th read, epoch after epoch): the simulator's cluster-opt."""
    steps = []
    for rank in range(HOSTS):
        base = torch.utils.data.DistributedSampler(range(images), num_replicas=HOSTS, rank=rank,
                                                   shuffle=True, seed=SEED)
        reads = []
        for epoch in range(EPOCHS):
            base.set_epoch(epoch)
            reads += list(base)
        steps.append(reads)
    timeline = [i for step in zip(*steps) for i in step]
    never = len(timeline)
    next_use, last = [never] * len(timeline), {}
    for t in range(len(timeline) - 1, -1, -1):
        next_use[t] = last.get(timeline[t], never)
        last[timeline[t]] = t
    held, heap, loads = {}, [], 0  # id -> next use; (-next use, id), stale entries skipped
    for t, i in enumerate(timeline):
        if i not in held:
            loads += 1
            if len(held) >= total_items:
                while -heap[0][0] != held.get(heap[0][1]):
                    heapq.heappop(heap)
                if -heap[0][0] <= next_use[t]:
                    continue  # the newcomer is read last: bypassed
                del held[heapq.heappop(heap)[1]]
        held[i] = next_use[t]
        heapq.heappush(heap, (-next_use[t], i))
    return loads


def run(shared, args, work, fraction=4, window=WINDOW):
    folder = tempfile.mkdtemp(prefix=f"cluster-{shared}-", dir=work)
    cfg = {"rendezvous": os.path.join(folder, "rendezvous"),
           "counter": os.path.join(folder, "loads"), "results": os.path.join(folder, "result"),
           "dir": args.dir, "images": args.images, "workers": args.workers, "shared": shared,
           "fraction": fraction, "window": window}
    open(cfg["counter"], "wb").close()
    mp.start_processes(host_main, args=(cfg,), nprocs=HOSTS, join=True, start_method="spawn")
    results = []
    for rank in range(HOSTS):
        with open(cfg["results"] + f".{rank}") as f:
            results.append(json.load(f))
    epoch_s = results[0]["epoch_s"]
    totals = {k: sum(r["stats"][k] for r in results) for k in results[0]["stats"]}
    return {"epoch_s": [round(t, 3) for t in epoch_s], "epochs_2_3_s": round(sum(epoch_s[1:]), 3),
            "source_loads": os.path.getsize(cfg["counter"]),
            "wrong": sum(r["wrong"] for r in results), "stats": totals}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--window-small", type=int, default=1,
                        help="peer_window of the 12.5%% run (its room for arrivals costs loads)")
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "opt4store-bench"))
    parser.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "results", "cluster.json"))
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    image_set(args.dir, args.images)  # written once, before the hosts start
    work = tempfile.mkdtemp(prefix="cluster-bench-")
    report = {"machine": machine_info(), "hosts": HOSTS, "images": args.images,
              "epochs": EPOCHS, "batch": BATCH, "workers": args.workers,
              "ram_items_per_host": args.images // 4 + 2 * WINDOW, "peer_window": WINDOW}
    for shared in ("local", "cluster"):
        report[shared] = run(shared, args, work)
        r = report[shared]
        print(f"{shared:8s} epochs {r['epoch_s']} s  source loads {r['source_loads']} "
              f"({r['source_loads'] / args.images:.2f} N)  wrong {r['wrong']}  "
              f"peer_hits {r['stats']['peer_hits']}", flush=True)
    speedup = report["local"]["epochs_2_3_s"] / report["cluster"]["epochs_2_3_s"]
    report["speedup_epochs_2_3"] = round(speedup, 2)
    small = args.images // 8
    r = report["cluster_12_5"] = run("cluster", args, work, fraction=8, window=args.window_small)
    total = HOSTS * (small + 2 * args.window_small)
    r.update(ram_items_per_host=small, peer_window=args.window_small, union_items=total,
             union_opt_loads=union_opt_loads(args.images, total))
    ratio = r["source_loads"] / r["union_opt_loads"]
    r["loads_over_union_opt"] = round(ratio, 4)
    print(f"cluster at 12.5%: source loads {r['source_loads']} against {r['union_opt_loads']} "
          f"for one OPT cache of {total} items: {ratio:.3f} (goal <= 1.02: "
          f"{'met' if ratio <= 1.02 else 'MISSED'})  wrong {r['wrong']}", flush=True)
    goal = "met" if speedup >= 2 else "MISSED"
    print(f"epochs 2-3: per-host stores {report['local']['epochs_2_3_s']} s, cluster "
          f"{report['cluster']['epochs_2_3_s']} s: {speedup:.2f}x (goal >= 2x: {goal})")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    wrong = sum(report[k]["wrong"] for k in ("local", "cluster", "cluster_12_5"))
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
