#!/usr/bin/env python3
"""DDP on one host, as users run it: two ranks share one store
(Store(..., shared="local")), against no cache and a store per rank.

Setup: IMAGES (1200) of bench/demo.py's JPEGs (512x512, decoded and
resized to 3x256x256 uint8 on every source load), samples (image, index);
each rank a process of its own with torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; gloo through a file), a shuffling
DistributedSampler (seeded) in a PlannedSampler, `sampler.set_epoch(e)`
each epoch, batch 32 a rank, drop_last=True, W workers a rank (default 2),
a new loader every epoch, a random flip + uint8 -> float augmentation after
the cache (transform=), and a small CNN in DistributedDataParallel with an
SGD step per batch (its gradients' all-reduce keeps the ranks in
lockstep). RAM for 30% of the decoded bytes on the host plus a disk tier.
3 epochs; then rank 0 saves a checkpoint (the sampler's state) and the
ranks exit. The restart: new rank processes reopen the store(s), load the
checkpoint and read epoch 4 (the open counts).

Configurations:
  no_cache      torch's DataLoader over the plain dataset (the same transform)
  per_rank      a store per rank (no shared=; half the host's RAM each) and
                torch's DataLoader over a CachedDataset: what a DDP script
                gets that wraps its dataset without shared="local"
  torch_shared  torch's DataLoader over a CachedDataset on the shared store
  opt4store     opt4store.DataLoader over the same
  opt4store_persistent  the same, one loader for the run with
                persistent_workers=True (the transform runs in the workers,
                so a new loader starts them again every epoch)
  opt4store_batch_aug  opt4store.DataLoader, a new loader per epoch, no
                transform=: the loop augments each batch (the same random
                flip per sample, and the float conversion, on the batch), as
                scripts that augment on the GPU do

Reported per configuration: each epoch's time (the slower rank's: the
ranks advance together), the floor (the same steps on one fixed batch, the
ranks in lockstep as above: what the epoch would take if loading cost
nothing), source loads of the whole host (a file every process appends a
byte to per load, DataLoader workers included), the restart's epoch and
first batch, and wrong samples: each batch's indices must be the
DistributedSampler's order for that rank and epoch (drop_last's length),
and each sample of CHECKED indices must equal a fresh decode, flipped or
not, as float.

Goals (opt4store, against no_cache in the same run): epochs 2-3 at least
4x faster; the restarted epoch at least 4x faster; source loads over the
epochs and the restart equal to the dataset's size (each sample decoded
once on the host, drop_last's tails included). Every wrong sample makes
the exit status 1; a missed goal says MISSED and does not.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/ddp_bench.py
       [--quick] [--images N] [--workers W] [--start exec|fork] [--dir DIR]
       [--json FILE]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.nn as nn
import torch.utils.data

import opt4store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench import Counted  # noqa: E402  (source loads, host-wide, in a file)
from demo import FINGERPRINT, JpegDataset, WithIndex  # noqa: E402
from e2e_bench import image_set, machine_info  # noqa: E402
from loader_bench import Transformed, flip_float  # noqa: E402

WORLD = 2
# 600 samples a rank: 18 batches an epoch. An epoch's fixed costs (a new
# loader's worker starts, about 0.1 s here) weigh on a short epoch: with 400
# images a cached epoch took 1.5-2.1x the persistent loader's, with 1200
# 1.3-1.5x. Real epochs are longer still.
IMAGES = 1200
EPOCHS = 3
RAM_RATIO = 0.3
SEED = 11
CHECKED = 48
CONFIGS = ("no_cache", "per_rank", "torch_shared", "opt4store", "opt4store_persistent",
           "opt4store_batch_aug")
# A rank that takes longer than this is stuck: the run fails, naming it.
RANK_TIMEOUT_S = 600


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.AvgPool2d(4), nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def flip_float_batch(images):
    """flip_float on a batch: each sample flipped with probability 1/2,
    then uint8 -> float32 in [0, 1]."""
    flip = torch.rand(len(images)) < 0.5
    images = images.float().div_(255)
    images[flip] = images[flip].flip(-1)
    return images


def train_step(model, optimizer, images, indices):
    loss = nn.functional.cross_entropy(model(images), indices % 10)
    optimizer.zero_grad()
    loss.backward()  # DDP's all-reduce: the ranks in lockstep
    optimizer.step()


class Checker:
    """Each batch against the rank's DistributedSampler order, and the
    samples of the reference indices against a fresh decode (the flip is
    random, so either orientation is right)."""

    def __init__(self, cfg, rank, jpeg):
        self.order = torch.utils.data.DistributedSampler(range(cfg["images"]),
                                                         num_replicas=WORLD, rank=rank,
                                                         shuffle=True, seed=SEED)
        g = torch.Generator().manual_seed(7)
        picks = torch.randperm(len(jpeg), generator=g)[:min(CHECKED, len(jpeg))].tolist()
        self.reference = {i: jpeg[i].float().div_(255) for i in picks}
        self.batch = cfg["batch"]
        self.wrong = self.checked = 0

    def epoch(self, epoch, seen):
        """seen: the epoch's indices in the order the batches brought them."""
        self.order.set_epoch(epoch)
        expected = list(self.order)
        expected = expected[:len(expected) // self.batch * self.batch]  # drop_last
        self.wrong += seen != expected

    def batch_values(self, images, indices):
        for k, i in enumerate(indices.tolist()):
            ref = self.reference.get(i)
            if ref is not None:
                self.checked += 1
                self.wrong += not (torch.equal(images[k], ref) or
                                   torch.equal(images[k], ref.flip(-1)))


def open_store(cfg, rank):
    budget = int(cfg["decoded"] * RAM_RATIO)
    if cfg["config"] == "per_rank":
        return opt4store.Store(f"{cfg['store']}-{rank}", ram=budget // WORLD,
                               disk=2 * cfg["decoded"], fingerprint=FINGERPRINT)
    return opt4store.Store(cfg["store"], ram=budget, disk=2 * cfg["decoded"],
                           fingerprint=FINGERPRINT, shared="local")


def rank_main(cfg, rank):
    """One rank: the training epochs (cfg["phase"] == "train") or the
    restart's epoch. Writes its figures to cfg["results"].<rank>."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + cfg["rendezvous"], rank=rank,
                            world_size=WORLD)
    jpeg = JpegDataset(cfg["images_dir"])
    check = Checker(cfg, rank, jpeg)
    source = Counted(WithIndex(jpeg), cfg["counter"])
    base = torch.utils.data.DistributedSampler(source, num_replicas=WORLD, rank=rank,
                                               shuffle=True, seed=SEED)
    dist.barrier()
    t0 = time.perf_counter()  # the restart's clock: the store's open counts, the group's not
    restart = cfg["phase"] == "restart"
    epochs = range(EPOCHS, EPOCHS + 1) if restart else range(EPOCHS)
    store = sampler = None
    batch_aug = cfg["config"] == "opt4store_batch_aug"
    if cfg["config"] == "no_cache":
        ds, sampler = Transformed(source, flip_float), base
    else:
        store = open_store(cfg, rank)
        sampler = opt4store.PlannedSampler(base, epochs=EPOCHS + 1)
        ds = opt4store.CachedDataset(source, store, sampler,
                                     transform=None if batch_aug else flip_float)
        if restart:
            sampler.load_state_dict(torch.load(cfg["checkpoint"]))  # rank 0's, on every rank
    model = DistributedDataParallel(small_cnn())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ours = cfg["config"].startswith("opt4store")
    persistent = cfg["config"] == "opt4store_persistent" and cfg["workers"] > 0
    loader_class = opt4store.DataLoader if ours else torch.utils.data.DataLoader
    times, first_batch, fixed, loader = [], None, None, None
    for epoch in epochs:
        sampler.set_epoch(epoch)  # as DDP loops do
        dist.barrier()
        start = t0 if restart else time.perf_counter()
        checking, seen = 0.0, []
        if loader is None or not persistent:
            loader = loader_class(ds, sampler=sampler, batch_size=cfg["batch"],
                                  num_workers=cfg["workers"], drop_last=True,
                                  persistent_workers=persistent)
        for images, indices in loader:
            if first_batch is None and restart:
                first_batch = time.perf_counter() - t0
            if batch_aug:
                images = flip_float_batch(images)  # the step's own work: timed
            c0 = time.perf_counter()
            check.batch_values(images, indices)
            seen.extend(indices.tolist())
            if fixed is None:
                fixed = (images.clone(), indices.clone())
            checking += time.perf_counter() - c0
            train_step(model, optimizer, images, indices)
        times.append(time.perf_counter() - start - checking)
        check.epoch(epoch, seen)
    floor = None
    if not restart:
        batches = len(base) // cfg["batch"]
        dist.barrier()
        start = time.perf_counter()
        for _ in range(batches):
            train_step(model, optimizer, *fixed)
        floor = time.perf_counter() - start
        if store is not None and rank == 0:
            torch.save(sampler.state_dict(consumed=sampler.epoch_length), cfg["checkpoint"])
    stats = None
    if store is not None:
        s = store.stats()
        stats = {k: s.get(k, 0) for k in ("hits_ram", "hits_disk", "source_loads", "prefetched",
                                          "expect_timeouts", "drift")}
        store.close()  # a shared store's owner waits for the other rank's close
    slowest = torch.tensor(times + [floor or 0.0], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    with open(cfg["results"] + f".{rank}", "w") as f:
        json.dump({"epoch_times": slowest[:-1].tolist(), "floor": slowest[-1].item(),
                   "first_batch": first_batch, "wrong": check.wrong, "checked": check.checked,
                   "stats": stats}, f)
    dist.destroy_process_group()


def rank_env(rank):
    """torchrun's environment for `rank`."""
    return {"RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(WORLD), "OMP_NUM_THREADS": "1"}


def run_ranks(cfg, folder, phase):
    """Starts the WORLD ranks of a phase as torchrun would (or forked, with
    cfg["start"] == "fork") and waits for them; their results, the slowest
    rank's times first (every rank has them), and the host's source loads
    in that phase."""
    cfg = dict(cfg, phase=phase, rendezvous=os.path.join(folder, f"rendezvous-{phase}"),
               results=os.path.join(folder, f"result-{phase}"))
    open(cfg["counter"], "wb").close()
    if cfg["start"] == "fork":
        fork_ranks(cfg)
    else:
        exec_ranks(cfg)
    results = []
    for rank in range(WORLD):
        with open(cfg["results"] + f".{rank}") as f:
            results.append(json.load(f))
    return results, os.path.getsize(cfg["counter"])


def exec_ranks(cfg):
    """The ranks as fresh interpreters, as torchrun starts them."""
    procs = []
    for rank in range(WORLD):
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--rank-child", json.dumps(cfg),
             str(rank)], env=dict(os.environ, **rank_env(rank)), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        outputs = [p.communicate(timeout=RANK_TIMEOUT_S)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise RuntimeError(f"{cfg['config']} {cfg['phase']}: the ranks did not finish in "
                           f"{RANK_TIMEOUT_S} s")
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        if p.returncode != 0:
            sys.stderr.write(out)
            raise RuntimeError(f"{cfg['config']} {cfg['phase']}: rank {rank} failed "
                               f"(rc {p.returncode})")


def fork_ranks(cfg):
    """The ranks forked from this process, which has imported torch and
    holds no store or process group: the same rank_main without a fresh
    interpreter's start (some 2.5 CPU-s on the 2-core machine, 20 of them
    in the harness's test). No figure counts that start either way."""
    pids = {}
    for rank in range(WORLD):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.environ.update(rank_env(rank))
                rank_main(cfg, rank)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids[pid] = rank
    deadline = time.monotonic() + RANK_TIMEOUT_S
    failed = []
    while pids:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if time.monotonic() > deadline:
                for p in pids:
                    os.kill(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                raise RuntimeError(f"{cfg['config']} {cfg['phase']}: the ranks did not finish "
                                   f"in {RANK_TIMEOUT_S} s")
            time.sleep(0.02)
            continue
        rank = pids.pop(pid)
        if os.waitstatus_to_exitcode(status) != 0:
            failed.append(f"rank {rank} (rc {os.waitstatus_to_exitcode(status)})")
    if failed:
        raise RuntimeError(f"{cfg['config']} {cfg['phase']}: {', '.join(failed)} failed")


def run_config(name, args, images_dir, decoded, work):
    folder = tempfile.mkdtemp(prefix=f"ddp-{name}-", dir=work)
    cfg = {"config": name, "images": args.images, "images_dir": images_dir,
           "decoded": decoded, "batch": args.batch, "workers": args.workers,
           "store": os.path.join(folder, "store"), "counter": os.path.join(folder, "loads"),
           "checkpoint": os.path.join(folder, "checkpoint.pt"), "start": args.start}
    train, loads = run_ranks(cfg, folder, "train")
    restart, restart_loads = run_ranks(cfg, folder, "restart")
    result = {"epoch_times": train[0]["epoch_times"], "floor": train[0]["floor"],
              "restart_time": restart[0]["epoch_times"][0],
              "restart_first_batch": max(r["first_batch"] for r in restart),
              "source_loads": loads, "restart_source_loads": restart_loads,
              "wrong": sum(r["wrong"] for r in train + restart),
              "checked": sum(r["checked"] for r in train + restart)}
    if train[0]["stats"] is not None:
        result["stats"] = [r["stats"] for r in train]
    shutil.rmtree(folder, ignore_errors=True)
    return result


def later(times):
    return sum(times[1:])


def goals(configs, images):
    base, ours = configs.get("no_cache"), configs.get("opt4store")
    if not base or not ours:
        return {}
    return {
        "cached_epochs_4x": {"ratio": later(base["epoch_times"]) / later(ours["epoch_times"]),
                             "target": ">= 4.0"},
        "restart_4x": {"ratio": base["restart_time"] / ours["restart_time"],
                       "target": ">= 4.0"},
        "loads_once": {"ratio": (ours["source_loads"] + ours["restart_source_loads"]) / images,
                       "target": "= 1.0"},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 images, batch 8 (the harness's test)")
    parser.add_argument("--images", type=int, default=None, help="default 1200 (--quick: 64)")
    parser.add_argument("--batch", type=int, default=None, help="a rank's; default 32 (--quick: 8)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers a rank")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--start", choices=("exec", "fork"), default="exec",
                        help="the ranks as fresh interpreters, as torchrun starts them "
                             "(default), or forked from this one (quicker to start)")
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "opt4store-bench"))
    parser.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "results", "ddp.json"))
    parser.add_argument("--rank-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_child:
        rank_main(json.loads(args.rank_child[0]), int(args.rank_child[1]))
        return 0
    args.images = args.images or (64 if args.quick else IMAGES)
    args.batch = args.batch or (8 if args.quick else 32)
    names = [c for c in args.configs.split(",") if c]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    if args.images % WORLD:
        parser.error(f"--images must be a multiple of the {WORLD} ranks (no padding)")
    os.makedirs(args.dir, exist_ok=True)
    jpeg = image_set(args.dir, args.images)  # written once, before the ranks start
    decoded = args.images * jpeg[0].numel()
    work = tempfile.mkdtemp(prefix="ddp-bench-", dir=args.dir)
    report = {"machine": machine_info(),
              "settings": {"images": args.images, "world": WORLD, "batch": args.batch,
                           "workers": args.workers, "epochs": EPOCHS, "ram_ratio": RAM_RATIO,
                           "drop_last": True, "transform": "random flip, uint8 -> float",
                           "model": "small CNN in DistributedDataParallel, SGD"},
              "configs": {}}
    wrong = 0
    for name in names:
        r = report["configs"][name] = run_config(name, args, os.path.dirname(jpeg.files[0]),
                                                 decoded, work)
        wrong += r["wrong"]
        print(f"{name:12s} epochs {' '.join('%.3f' % t for t in r['epoch_times'])} s  "
              f"floor {r['floor']:.3f} s  restart {r['restart_time']:.3f} s "
              f"(first batch {1e3 * r['restart_first_batch']:.0f} ms)  source loads "
              f"{r['source_loads']} + {r['restart_source_loads']} of {args.images}  "
              f"wrong {r['wrong']} of {r['checked']} checked", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    report["goals"] = goals(report["configs"], args.images)
    for name, g in report["goals"].items():
        target = float(g["target"].split()[1])
        g["met"] = g["ratio"] >= target if g["target"].startswith(">=") else \
            g["ratio"] == target
        print(f"goal {name}: {g['ratio']:.3f} (target {g['target']}) "
              f"{'met' if g['met'] else 'MISSED'}")
    report["wrong"] = wrong
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.json}; wrong samples: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
