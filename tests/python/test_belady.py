"""The Belady equality: with a capacity in items, uniform sizes, no disk
tier and 0 workers, the store loads from the source exactly reads - hits of
an offline Belady (MIN with bypass) on the recorded sequence."""

import random

import pytest
import torch
import torch.utils.data

import opt4store
import opt4store.sampler as sampler_module
from o4s_testlib import (UniformDataset, belady_hits, belady_hits_scan, check_epoch,
                         epoch_then_part_of_the_next, optimal_hits_exhaustive, uniform_item)

N = 150
EPOCHS = 4
BATCH = 10


def base_sampler(kind, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "shuffled":
        return torch.utils.data.RandomSampler(range(N), generator=g)
    if kind == "replacement":
        return torch.utils.data.RandomSampler(range(N), replacement=True, generator=g)
    if kind == "weighted":
        weights = torch.linspace(0.1, 3.0, N)  # skewed: some items are read often
        return torch.utils.data.WeightedRandomSampler(weights, N, replacement=True, generator=g)
    if kind == "list":  # a fixed list of indices, the same every epoch
        rng = random.Random(seed)
        return [rng.randrange(N) for _ in range(N)]
    raise ValueError(kind)


@pytest.mark.parametrize("capacity", [1, 10, 50, 100, N])
@pytest.mark.parametrize("kind", ["shuffled", "replacement", "weighted", "list"])
def test_source_loads_equal_belady(tmp_path, counter, kind, capacity):
    store = opt4store.Store(tmp_path / "store", ram_items=capacity, disk=0)
    sampler = opt4store.PlannedSampler(base_sampler(kind, 17 + capacity), epochs=EPOCHS)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=0)
    try:
        for epoch in range(EPOCHS):
            wrong = check_epoch(loader, sampler.plan, epoch, N, BATCH, uniform_item, stacked=True)
            assert wrong == [], wrong[:3]
        sequence = [int(i) for i in sampler.plan]
        assert len(sequence) == N * EPOCHS
        hits = belady_hits(sequence, capacity)
        assert hits == belady_hits_scan(sequence, capacity)
        st = store.stats()
        assert st["accesses"] == len(sequence), st
        assert counter.count == st["source_loads"], st
        assert st["source_loads"] == len(sequence) - hits, (
            f"{kind}, C={capacity}: store loaded {st['source_loads']}, "
            f"Belady loads {len(sequence) - hits} of {len(sequence)} reads")
        assert st["hits_ram"] == hits, st
    finally:
        store.close()


def test_byte_capacity_counts_items_as_the_arena_holds_them(tmp_path, counter):
    """With a byte capacity, an item counts as its bytes rounded up to the
    RAM tier's 64-byte units: 62 floats and their header take 320 bytes of
    the arena, not their 264. The store then keeps what the policy
    plans (no failed insert) and loads exactly Belady's misses for the
    capacity in those items; counting raw bytes, it planned more than fit."""
    n, epochs = 2000, 3
    store = opt4store.Store(tmp_path / "store", ram=200_000, disk=0)
    shuffle = torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(5))
    sampler = opt4store.PlannedSampler(shuffle, epochs=epochs)
    ds = opt4store.CachedDataset(UniformDataset(n, numel=62, counter=counter), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=50, num_workers=0)
    try:
        for epoch in range(epochs):
            wrong = check_epoch(loader, sampler.plan, epoch, n, 50,
                                lambda i: uniform_item(i, 62), stacked=True)
            assert wrong == [], wrong[:3]
        st = store.stats()
        raw = st["ram_bytes_used"] / st["ram_items"]
        assert raw == 264, st  # 320 bytes in whole units
        capacity = st["ram_capacity"] // 320
        sequence = [int(i) for i in sampler.plan]
        hits = belady_hits(sequence, capacity)
        assert st["ram_insert_failures"] == 0, st
        assert st["ram_items"] == capacity, st
        assert st["hits_ram"] == hits == st["policy_hits"], st
        assert counter.count == st["source_loads"] == len(sequence) - hits, st
    finally:
        store.close()


def test_belady_oracle_is_optimal_on_small_sequences():
    """The test's own Belady against an exhaustive search over every
    admission and eviction choice, so that the equality above means OPT."""
    rng = random.Random(8)
    for _ in range(150):
        ids = rng.randint(2, 5)
        sequence = tuple(rng.randrange(ids) for _ in range(rng.randint(1, 11)))
        for capacity in range(1, ids + 1):
            best = optimal_hits_exhaustive(sequence, capacity)
            assert belady_hits(sequence, capacity) == best, (sequence, capacity)
            assert belady_hits_scan(sequence, capacity) == best, (sequence, capacity)


def test_belady_oracle_known_values():
    # a b c a b c with room for 2: keep a and b (or bypass c): 2 hits.
    assert belady_hits(list("abcabc"), 2) == 2
    assert belady_hits(list("abcabc"), 3) == 3
    assert belady_hits(list("aaaa"), 1) == 3
    assert belady_hits(list("abab"), 0) == 0
    assert belady_hits([], 4) == 0


@pytest.mark.parametrize("capacity", [10, 50, N])
def test_rollback_in_process_keeps_ram(tmp_path, counter, capacity):
    """A rollback to a checkpoint in the same process (load_state_dict
    mid-epoch): the store's new plan starts from what RAM holds, so the
    source is called reads - hits of Belady over RAM's contents read once
    before the replayed reads (with capacity N: never)."""
    store = opt4store.Store(tmp_path / "store", ram_items=capacity, disk=0)
    sampler = opt4store.PlannedSampler(base_sampler("shuffled", 5), epochs=3)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=0)
    try:
        checkpoint = epoch_then_part_of_the_next(loader, sampler.state_dict, 7)
        in_ram = [i for i in range(N) if store.peek(i) is not None]
        assert 0 < len(in_ram) <= capacity
        sampler.load_state_dict(checkpoint)
        counter.reset()
        for epoch in (1, 2):
            wrong = check_epoch(loader, sampler.plan, epoch, N, BATCH, uniform_item, stacked=True)
            assert wrong == [], wrong[:3]
        replayed = [int(i) for i in sampler.plan[N:]]
        hits = belady_hits(in_ram + replayed, capacity)
        assert counter.count == len(replayed) - hits, (
            f"C={capacity}: {counter.count} source loads after the rollback, Belady from "
            f"RAM's {len(in_ram)} items loads {len(replayed) - hits}")
        if capacity == N:
            assert counter.count == 0
    finally:
        store.close()


def test_another_sampler_bound_to_the_store_finds_what_ram_holds(tmp_path, counter):
    """A switch to another sampler mid-run (a curriculum's next stage: a
    third of the items, another seed) over the same store: binding it
    re-plans the store, and what RAM holds stays where the new plan reads
    it, so the new stage loads nothing RAM has. (RAM holds what the old plan
    still had to read: at a plan's end, OPT has kept nothing in RAM, and
    only a disk tier carries values over.)"""
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    ds = UniformDataset(N, counter=counter)
    first = opt4store.PlannedSampler(base_sampler("shuffled", 1), epochs=2)
    loader = torch.utils.data.DataLoader(opt4store.CachedDataset(ds, store, first),
                                         sampler=first, batch_size=BATCH)
    try:
        for _ in loader:  # epoch 1 of 2: every item is read again, so RAM keeps all
            pass
        assert counter.count == N
        subset = list(range(0, N, 3))
        second = opt4store.PlannedSampler(
            torch.utils.data.SubsetRandomSampler(subset,
                                                 generator=torch.Generator().manual_seed(2)),
            epochs=2)
        loader = torch.utils.data.DataLoader(opt4store.CachedDataset(ds, store, second),
                                             sampler=second, batch_size=BATCH)
        # The items the new plan never reads left RAM; the others stayed.
        assert [i for i in range(N) if store.peek(i) is not None] == subset
        counter.reset()  # the new CachedDataset's spot check loaded 2 items to compare
        for epoch in range(2):
            wrong = check_epoch(loader, second.plan, epoch, len(subset), BATCH, uniform_item,
                                stacked=True)
            assert wrong == [], wrong[:3]
        assert counter.count == 0, f"{counter.count} loaded again in the new stage"
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["replacement", "weighted", "shuffled"])
def test_a_lazily_recorded_plan_of_short_epochs_loads_what_belady_loads(tmp_path, counter,
                                                                       monkeypatch, kind):
    """A long plan is recorded a few epochs ahead of the reads. Epochs of
    150 are shorter than the planner's reach (prefetch_depth 512): enough
    of them are recorded that it still knows the next read of every item
    it plans (before, 2 ahead: it planned into an epoch whose next reads
    were not recorded yet, and loaded more than Belady)."""
    whole = [int(i) for i in opt4store.PlannedSampler(base_sampler(kind, 5), EPOCHS).plan]
    monkeypatch.setattr(sampler_module, "WHOLE_PLAN_READS", 0)
    capacity = 10
    store = opt4store.Store(tmp_path / "store", ram_items=capacity, disk=0)
    sampler = opt4store.PlannedSampler(base_sampler(kind, 5), epochs=EPOCHS)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=0)
    try:
        for epoch in range(EPOCHS):
            for _ in loader:
                pass
        st = store.stats()
        assert st["accesses"] == len(whole) and st["drift"] == 0, st
        assert st["source_loads"] == len(whole) - belady_hits(whole, capacity), st
    finally:
        store.close()
