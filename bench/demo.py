#!/usr/bin/env python3
"""opt4store's demo: a decode-bound JPEG dataset read through the store.

It writes a few hundred 512x512 JPEGs (seeded noise over gradients, so that
decoding does real work), whose Dataset decodes each one and resizes it to
256x256 (PIL), returning a uint8 tensor. Then:

  plain       3 shuffled epochs through the plain Dataset (torch's DataLoader);
  opt4store   the same 3 epochs (same shuffle) through opt4store.DataLoader
              over a CachedDataset, with RAM for 30% of the decoded bytes
              plus a disk tier for all;
  restart     a new process opens the same store and reads a 4th epoch,
              against a 4th plain epoch.

It prints epoch times, where the samples came from, and speedups, and
checks that every sample the store returned equals the decoded one.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/demo.py
       [--images N] [--workers K] [--ram-ratio R] [--dir DIR] [--json FILE]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.utils.data
from PIL import Image

import opt4store

SIDE = 512
OUT = 256
# Names what made the cached values (what the README advises): a reopened
# store is then known to match, with no spot check of source loads.
FINGERPRINT = f"demo-jpeg-{SIDE}-to-{OUT}"


def make_images(folder, n, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    for i in range(n):
        base = (np.stack([xx * (i % 7 + 1), yy * (i % 5 + 1), xx + yy], -1) // 4) % 256
        noise = rng.integers(0, 64, (SIDE, SIDE, 3))
        img = ((base + noise) % 256).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)


class JpegDataset(torch.utils.data.Dataset):
    """Decodes and resizes on every access: the cost the store removes."""

    def __init__(self, folder):
        self.files = sorted(os.path.join(folder, f) for f in os.listdir(folder))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with Image.open(self.files[i]) as im:
            im = im.convert("RGB").resize((OUT, OUT), Image.BILINEAR)
            return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1).contiguous()


def run_epochs(loader, epochs, check=None):
    """Epoch times; the check runs after each epoch on the batches kept (run
    between batches, its decodes would give the loaders' prefetch time that
    a training step does not)."""
    times, first_batch = [], None
    for _ in range(epochs):
        t0 = time.perf_counter()
        kept = []
        for k, (x, idx) in enumerate(loader):
            if first_batch is None:
                first_batch = time.perf_counter() - t0
            if check is not None:
                kept.append((x, idx))
        times.append(time.perf_counter() - t0)
        for x, idx in kept:
            check(x, idx)
    return times, first_batch


class WithIndex(torch.utils.data.Dataset):
    """(sample, index) pairs, so that the demo can check each sample."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[i], int(i)


def loader_for(ds, sampler, workers):
    """torch's DataLoader over the plain dataset."""
    return torch.utils.data.DataLoader(WithIndex(ds), sampler=sampler, batch_size=32,
                                       num_workers=workers, persistent_workers=workers > 0)


def cached_loader(ds, store, sampler, workers):
    """The one-line change: opt4store.DataLoader over a CachedDataset of the
    same (image, index) samples."""
    return opt4store.DataLoader(opt4store.CachedDataset(WithIndex(ds), store, sampler),
                                sampler=sampler, batch_size=32, num_workers=workers,
                                persistent_workers=workers > 0)


def restart_child(args):
    """The 4th epoch in a fresh process: reopen the store, read, report."""
    ds = JpegDataset(args.images_dir)
    store = opt4store.Store(args.store_dir, fingerprint=FINGERPRINT)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(1)), epochs=1)
    times, first = run_epochs(cached_loader(ds, store, sampler, args.workers), 1)
    stats = store.stats()
    store.close()
    print(json.dumps({"time": times[0], "first_batch": first, "stats": stats}))


def main():
    parser = argparse.ArgumentParser(description="opt4store demo")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ram-ratio", type=float, default=0.3,
                        help="the RAM tier as a share of the decoded bytes (default 0.3)")
    parser.add_argument("--dir", default=None, help="work folder (default: a temp folder)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--restart-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--images-dir", help=argparse.SUPPRESS)
    parser.add_argument("--store-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.restart_child:
        restart_child(args)
        return 0

    started = time.perf_counter()
    work = args.dir or tempfile.mkdtemp(prefix="opt4store-demo-", dir="/var/tmp")
    images_dir = os.path.join(work, "images")
    store_dir = os.path.join(work, "store")
    shutil.rmtree(store_dir, ignore_errors=True)
    os.makedirs(images_dir, exist_ok=True)
    if len(os.listdir(images_dir)) != args.images:
        shutil.rmtree(images_dir)
        os.makedirs(images_dir)
        print(f"writing {args.images} JPEGs of {SIDE}x{SIDE} to {images_dir} ...", flush=True)
        make_images(images_dir, args.images)
    ds = JpegDataset(images_dir)
    decoded = len(ds) * 3 * OUT * OUT
    if not 0 < args.ram_ratio <= 4:
        parser.error("--ram-ratio: more than 0, at most 4")
    ram = int(decoded * args.ram_ratio)
    print(f"dataset: {len(ds)} JPEGs, decoded to 3x{OUT}x{OUT} uint8 ({decoded / 2**20:.1f} MiB);"
          f" RAM tier {ram / 2**20:.1f} MiB ({args.ram_ratio:.0%}), disk tier for all;"
          f" batch 32, {args.workers} workers", flush=True)

    epochs = 3
    gen = lambda: torch.Generator().manual_seed(1)  # noqa: E731  same shuffles for both runs
    plain_times, plain_first = run_epochs(
        loader_for(ds, torch.utils.data.RandomSampler(ds, generator=gen()), args.workers), epochs)
    # The 4th plain epoch, for the restart comparison.
    plain4, _ = run_epochs(
        loader_for(ds, torch.utils.data.RandomSampler(ds, generator=gen()), args.workers), 1)

    reference = {}
    wrong = [0]

    def check(x, idx):
        for k, i in enumerate(idx.tolist()):
            if i not in reference:
                reference[i] = ds[i]
            if not torch.equal(x[k], reference[i]):
                wrong[0] += 1

    store = opt4store.Store(store_dir, ram=ram, disk=decoded * 2, fingerprint=FINGERPRINT)
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(ds, generator=gen()),
                                       epochs=epochs)
    per_epoch = []
    loader = cached_loader(ds, store, sampler, args.workers)
    store_times = []
    previous = dict(store.stats())
    for e in range(epochs):
        t, _ = run_epochs(loader, 1, check if e == epochs - 1 else None)
        store_times += t
        now = store.stats()
        per_epoch.append({k: now[k] - previous.get(k, 0)
                          for k in ("accesses", "hits_ram", "hits_disk", "source_loads",
                                    "prefetched", "hits_disk_bytes", "prefetch_bytes")})
        previous = dict(now)
    del loader
    final = store.stats()
    store.close()

    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--restart-child", "--images-dir", images_dir,
         "--store-dir", store_dir, "--workers", str(args.workers)],
        capture_output=True, text=True, env=os.environ)
    if child.returncode != 0:
        print(child.stderr, file=sys.stderr)
        return 1
    restart = json.loads(child.stdout.strip().splitlines()[-1])

    def row(name, plain_t, store_t, s):
        served = s["accesses"] or 1
        return (f"{name:<18}{plain_t:>9.3f}s{store_t:>9.3f}s{plain_t / store_t:>9.1f}x"
                f"{s['hits_ram'] / served:>7.0%}{s['hits_disk'] / served:>7.0%}"
                f"{s['source_loads'] / served:>9.0%}")

    print()
    print(f"{'epoch':<18}{'plain':>10}{'opt4store':>10}{'speedup':>10}{'RAM':>7}{'disk':>7}"
          f"{'decoded':>9}")
    for e in range(epochs):
        print(row(f"{e + 1}", plain_times[e], store_times[e], per_epoch[e]))
    rs = restart["stats"]
    print(row("4 (after restart)", plain4[0], restart["time"], rs))
    print()
    later = sum(plain_times[1:]) / sum(store_times[1:])
    first = store_times[0] / plain_times[0] - 1
    first_text = (f"{first:.0%} more than plain (the store writes what it decodes)" if first > 0
                  else f"{-first:.0%} less than plain")
    print(f"epochs 2-3: {later:.1f}x faster than plain; epoch 1 took {first_text}; after a restart the first epoch is {plain4[0] / restart['time']:.1f}x faster"
          f" and its first batch arrives in {restart['first_batch'] * 1e3:.0f} ms.")
    disk_bytes = sum(e["hits_disk_bytes"] + e["prefetch_bytes"] for e in per_epoch[1:])
    print(f"epochs 2-3 read {disk_bytes / 2**20:.0f} MiB from the disk tier (on demand and"
          f" prefetched), {disk_bytes / 2**30 / sum(store_times[1:]):.2f} GiB/s of their time:"
          f" with RAM for {args.ram_ratio:.0%} of the data, the disk's speed bounds theirs.")
    print(f"RAM: served by the RAM tier ({final['hits_ram']} reads in epochs 1-3; of them,"
          f" {final['prefetched']} items were prefetched from the disk tier ahead of the readers);"
          f" disk: read from the disk tier on demand ({final['hits_disk']}), at the disk's speed;"
          f" decoded: loaded from the JPEGs.")
    print(f"checked: {len(reference)} samples of epoch 3 against a fresh decode: "
          f"{wrong[0]} wrong. Store: {final['disk_items']} items on disk,"
          f" {final['ram_bytes_used'] / 2**20:.1f} MiB in RAM. Took {time.perf_counter() - started:.0f} s.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"plain": plain_times + plain4, "store": store_times + [restart["time"]],
                       "per_epoch": per_epoch, "restart": restart, "wrong": wrong[0]}, f, indent=2)
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if wrong[0] else 0


if __name__ == "__main__":
    sys.exit(main())
