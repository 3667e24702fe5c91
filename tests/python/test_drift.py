"""Drift: indices the plan did not predict still get the right values; the
store counts them in stats()['drift'] and CachedDataset warns once."""

import time
import warnings

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, check_epoch, uniform_item

N = 200
BATCH = 20

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def planned(tmp_path, counter=None, seed=3, epochs=2, capacity=N // 4):
    store = opt4store.Store(tmp_path / "store", ram_items=capacity, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(seed)),
        epochs=epochs)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    return store, sampler, ds


def drift_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and
            "drift" in str(w.message)]


def test_loader_with_another_sampler_in_the_main_process(tmp_path, counter):
    """The DataLoader gets a SequentialSampler, the dataset a planned random
    order: plain int indices, taken as the next plan positions."""
    store, sampler, ds = planned(tmp_path, counter)
    loader = torch.utils.data.DataLoader(ds, sampler=torch.utils.data.SequentialSampler(ds),
                                         batch_size=BATCH, num_workers=0)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrong = []
            for epoch in range(2):
                wrong += check_epoch(loader, list(range(N)) * 2, epoch, N, BATCH, uniform_item,
                                     stacked=True)
        assert wrong == [], wrong[:3]
        assert len(drift_warnings(caught)) == 1, [str(w.message) for w in caught]
        st = store.stats()
        assert st["accesses"] == 2 * N, st
        # Nearly every read is off the plan (a random order vs 0, 1, 2, ...).
        assert st["drift"] > N, st
        assert st["source_loads"] == counter.count
    finally:
        store.close()


def test_direct_unplanned_reads(tmp_path, counter):
    store, sampler, ds = planned(tmp_path, counter)
    try:
        order = [int(i) for i in reversed(sampler.plan[:N])]
        assert order != [int(i) for i in sampler.plan[:N]]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in order + order:
                got = ds[i]
                assert torch.equal(got, uniform_item(i)), i
        assert len(drift_warnings(caught)) == 1, [str(w.message) for w in caught]
        message = str(drift_warnings(caught)[0].message)
        assert "plan" in message and "drift" in message
        st = store.stats()
        assert st["drift"] > 0, st
        assert st["accesses"] == 2 * N, st
    finally:
        store.close()


def test_planned_reads_do_not_warn_or_count_drift(tmp_path):
    store, sampler, ds = planned(tmp_path)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for epoch in range(2):
                assert check_epoch(loader, sampler.plan, epoch, N, BATCH, uniform_item,
                                   stacked=True) == []
        assert store.stats()["drift"] == 0
    finally:
        store.close()


def test_workers_with_another_planned_sampler(tmp_path, counter):
    """The loader's PlannedSampler has another seed than the one the store
    was planned with: positioned reads of other ids, in 2 workers."""
    store, sampler, ds = planned(tmp_path, counter, seed=3)
    other = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(4)),
        epochs=2)
    assert list(other.plan) != list(sampler.plan)
    loader = torch.utils.data.DataLoader(ds, sampler=other, batch_size=BATCH, num_workers=2,
                                         multiprocessing_context="fork")
    try:
        wrong = []
        for epoch in range(2):
            wrong += check_epoch(loader, other.plan, epoch, N, BATCH, uniform_item, stacked=True)
        assert wrong == [], wrong[:3]
        st = store.stats()
        assert st["accesses"] == 2 * N, st
        assert st["drift"] > N, st
        assert st["source_loads"] == counter.count, st
    finally:
        del loader
        store.close()


def test_workers_with_a_plain_sampler_serve_right_values(tmp_path, counter):
    """Plain int indices in a worker are unplanned reads (documented in
    CachedDataset): the values are still right."""
    store, sampler, ds = planned(tmp_path, counter)
    loader = torch.utils.data.DataLoader(ds, sampler=torch.utils.data.SequentialSampler(ds),
                                         batch_size=BATCH, num_workers=2,
                                         multiprocessing_context="fork")
    try:
        wrong = []
        for epoch in range(2):
            wrong += check_epoch(loader, list(range(N)) * 2, epoch, N, BATCH, uniform_item,
                                 stacked=True)
        assert wrong == [], wrong[:3]
        st = store.stats()
        assert st["accesses"] == 2 * N, st
        assert st["source_loads"] == counter.count, st
    finally:
        del loader
        store.close()


def test_drift_in_one_process_does_not_wait_in_vain(tmp_path):
    """With 0 workers the main process is the only reader: when it reads an
    id off the plan, no other reader is loading that id, so it must not
    wait (up to 2 s a time) for someone else's Put. Drifted reads should
    cost about what planned ones do."""
    store, sampler, ds = planned(tmp_path)
    loader = torch.utils.data.DataLoader(ds, sampler=torch.utils.data.SequentialSampler(ds),
                                         batch_size=BATCH, num_workers=0)
    try:
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for epoch in range(2):
                assert check_epoch(loader, list(range(N)) * 2, epoch, N, BATCH, uniform_item,
                                   stacked=True) == []
        elapsed = time.monotonic() - start
        st = store.stats()
        assert st["drift"] > 0, st
        assert st["expect_timeouts"] == 0, (
            f"{st['expect_timeouts']} reads waited in vain ({st['wait_ns'] / 1e9:.1f} s) "
            f"for a Put no reader was going to make; {2 * N} reads took {elapsed:.1f} s")
    finally:
        store.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_reads_past_the_plan_mixed_with_planned_ones_in_a_batch(tmp_path, workers):
    # A plan of 6 reads, a loader reading all N: batches mix planned
    # positions with reads the plan has no position for. Under NumPy 1 the
    # batch's positions became floats, refused as "expected ints".
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    ds = opt4store.CachedDataset(UniformDataset(N), store,
                                 opt4store.PlannedSampler(list(range(6)), epochs=1))
    kwargs = dict(num_workers=workers, multiprocessing_context="fork") if workers else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the drift warning
        got = torch.cat(list(torch.utils.data.DataLoader(ds, batch_size=4, **kwargs)))
    assert torch.equal(got, torch.stack([uniform_item(i) for i in range(N)]))
    store.close()


@pytest.mark.parametrize("bad", [N, -1, "a", 1.0, torch.tensor([1, 2])])
def test_a_refused_read_takes_no_plan_position(tmp_path, bad):
    """ds[bad] raises before it takes the next plan position: the planned
    reads after it neither drift nor wait (they drifted, warned for the bad
    index, and waited 2 s for a Put at the position it took)."""
    store, sampler, ds = planned(tmp_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with pytest.raises(opt4store.Error):
                ds[bad]
            for index in sampler.plan[:10].tolist():
                assert torch.equal(ds[index], uniform_item(index))
        st = store.stats()
        assert st["drift"] == 0 and st["expect_timeouts"] == 0, st
    finally:
        store.close()


def test_a_subset_with_tensor_indices(tmp_path):
    """torch.utils.data.Subset(ds, torch.randperm(n)[:k]) reads ds[0-d
    tensor] (refused as 'expected an int' before), in the main process and
    in workers."""
    store, _, ds = planned(tmp_path)
    chosen = torch.randperm(N, generator=torch.Generator().manual_seed(1))[:BATCH]
    subset = torch.utils.data.Subset(ds, chosen)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its order drifts from the plan
            for workers in (0, 2):
                got = torch.cat(list(torch.utils.data.DataLoader(
                    subset, batch_size=4, num_workers=workers,
                    multiprocessing_context="fork" if workers else None)))
                assert torch.equal(got, torch.stack([uniform_item(int(i)) for i in chosen]))
            assert torch.equal(subset[3], uniform_item(int(chosen[3])))
    finally:
        store.close()
