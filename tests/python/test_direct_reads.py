"""Workers read disk-tier items from the segment files themselves (the
places the owner publishes), not through the owner: with a RAM tier far
smaller than the data, cached epochs served by 2 workers equal the source
sample for sample, load nothing again, and their disk hits are the workers'
own reads (hits_disk_direct), forked or spawned."""

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import CallCounter, UniformDataset, check_epoch, uniform_item

N = 240
NUMEL = 4096  # 16 KiB per sample: 3.8 MiB in all
BATCH = 16
EPOCHS = 3


def flip(x):
    """A transform= that runs in the workers (deterministic, so it can be checked)."""
    return x.flip(0)


def flipped_item(i):
    return uniform_item(i, NUMEL).flip(0)


@pytest.mark.parametrize("which", ["torch", "torch_spawn", "opt4store_transform"])
def test_workers_read_the_disk_themselves(tmp_path, which):
    counter = CallCounter(tmp_path / "calls")
    store = opt4store.Store(tmp_path / "store", ram=512 << 10, disk=64 << 20)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(3)),
        epochs=EPOCHS)
    transform = flip if which == "opt4store_transform" else None
    ds = opt4store.CachedDataset(UniformDataset(N, NUMEL, counter), store, sampler,
                                 transform=transform)
    expected = flipped_item if transform else (lambda i: uniform_item(i, NUMEL))
    try:
        wrong = []
        for epoch in range(EPOCHS):
            if which.startswith("torch"):
                context = "spawn" if which == "torch_spawn" else None  # spawned: Store.attach
                loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                                     num_workers=2,
                                                     multiprocessing_context=context)
            else:
                loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                              num_workers=2)
            wrong += check_epoch(loader, sampler.plan, epoch, N, BATCH, expected, stacked=True)
            del loader
        assert wrong == [], f"{len(wrong)} wrong samples; first: {wrong[:3]}"
        st = store.stats()
        assert st["source_loads"] == N == counter.count, st  # epoch 1 only
        assert st["hits_disk_direct"] > 0, st
        assert st["hits_disk_direct"] <= st["hits_disk"], st
        # A fetch only where a worker found no place: none here (no compaction).
        assert st["fetch_requests"] == 0, st
    finally:
        store.close()
