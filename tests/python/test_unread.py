"""Planned positions that nobody reads (issue 14): drop_last's tail and a
loop that breaks off, under torch's own DataLoader with workers. The store
passes them once readers are in the next epoch: no reader waits for a value
that nobody loads, and the frontier does not stay behind. And reads that
lost their position (a wrapper Dataset's ds[int(i)] in a worker) find it
again in the plan near the frontier."""

import time

import torch
import torch.utils.data

import opt4store
from o4s_testlib import IntIndexWrapper

N = 60
BATCH = 8  # 60 = 7 x 8 + 4: drop_last leaves 4 positions of each epoch unread


class Source(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.full((32,), int(i), dtype=torch.int64)


def cached(tmp_path, epochs):
    store = opt4store.Store(tmp_path / "s", ram_items=N // 3, disk="4MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(5)),
        epochs=epochs)
    return store, sampler, opt4store.CachedDataset(Source(), store, sampler)


def check(batch):
    assert torch.equal(batch[:, 0:1].expand(-1, 32), batch)


def settle(store, abandoned):
    """stats() once the planner had time past the store's grace."""
    deadline = time.monotonic() + 5
    while True:
        st = store.stats()
        if st["abandoned_positions"] >= abandoned or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_drop_last_tail_is_passed_without_waits(tmp_path):
    store, sampler, ds = cached(tmp_path, epochs=3)
    for _ in range(3):
        batches = list(torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                                   drop_last=True, num_workers=2))
        assert len(batches) == N // BATCH
        for batch in batches:
            check(batch)
    st = settle(store, abandoned=2 * (N % BATCH))
    # Readers of epochs 2 and 3 never waited for a Put from an unread tail.
    assert st["expect_timeouts"] == 0, st
    # Epochs 1 and 2's tails are passed; epoch 3's is the end of the plan.
    assert st["abandoned_positions"] == 2 * (N % BATCH), st
    assert st["position"] == 2 * N + N // BATCH * BATCH, st  # the frontier
    store.close()


def test_a_loop_that_breaks_off_does_not_stall_the_next_epoch(tmp_path):
    store, sampler, ds = cached(tmp_path, epochs=2)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2)
    for k, batch in enumerate(loader):
        check(batch)
        if k == 2:
            break
    for batch in torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                             num_workers=2):
        check(batch)
    st = settle(store, abandoned=1)
    assert st["expect_timeouts"] == 0, st
    assert st["abandoned_positions"] > 0, st
    store.close()


def run_epochs(tmp_path, name, wrap, workers, n=400, epochs=3):
    store = opt4store.Store(tmp_path / name, ram_items=n // 3, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(2)),
        epochs=epochs)
    ds = opt4store.CachedDataset(Numbers(n), store, sampler)
    for _ in range(epochs):
        loader = torch.utils.data.DataLoader(IntIndexWrapper(ds) if wrap else ds,
                                             sampler=sampler, batch_size=16, num_workers=workers)
        for batch in loader:
            assert torch.equal(batch[:, 0:1].expand(-1, 32), batch)
    st = settle(store, abandoned=0)
    store.close()
    return st


class Numbers(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((32,), int(i), dtype=torch.int64)


def test_a_wrapper_that_loses_positions_in_workers_keeps_the_plans_hits(tmp_path):
    planned = run_epochs(tmp_path, "planned", wrap=False, workers=0)
    wrapped = run_epochs(tmp_path, "wrapped", wrap=True, workers=2)
    # The reads find their positions again near the frontier: the same
    # source loads as the plan's own reads, within 1%, and no drift.
    assert abs(wrapped["source_loads"] - planned["source_loads"]) <= \
        0.01 * planned["source_loads"], (wrapped, planned)
    assert wrapped["drift"] == 0, wrapped
    assert wrapped["position"] == planned["position"] == 3 * 400, (wrapped, planned)
    assert wrapped["ram_items"] <= wrapped["ram_capacity"], wrapped


def test_ram_tier_bytes_stay_within_ram_prefetch_included(tmp_path):
    """Staging is part of ram= (issue 14): with the disk tier prefetching,
    drop_last's unread tails and workers, the RAM tier never holds more
    than ram= bytes, and it does use the staging part."""
    n = 200
    ram = 256 * 1024  # about a third of the 4 KiB samples
    store = opt4store.Store(tmp_path / "s", ram=ram, disk="16MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(9)),
        epochs=4)
    ds = opt4store.CachedDataset(Wide(n), store, sampler)
    st = store.stats()
    assert st["ram_arena_bytes"] <= ram, st
    assert st["ram_capacity"] == ram - ram // 8, st  # staging's default: ram/8
    peak = 0
    for epoch in range(4):
        if epoch < 2:
            loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=16,
                                                 drop_last=True, num_workers=2)
        else:
            loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=16, num_workers=2)
        for batch in loader:
            assert torch.equal(batch[:, 0:1].expand(-1, batch.shape[1]), batch)
            peak = max(peak, store.stats()["ram_bytes_used"])
    st = store.stats()
    assert st["prefetched"] > 0, st
    assert peak <= ram, (peak, st)
    # The staging part was used: by the tier's own peak, since the loop's
    # samples between batches miss a short use on a loaded machine.
    assert st["ram_bytes_peak"] > st["ram_capacity"], st
    assert peak <= st["ram_bytes_peak"] <= ram, st  # the tier's own peak
    store.close()


class Wide(Numbers):
    def __getitem__(self, i):
        return torch.full((512,), int(i), dtype=torch.int64)
