"""Drift: indices the plan did not predict still get the right values; the
store counts them in stats()['drift'] and CachedDataset warns once."""

import time
import warnings

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import CallCounter, UniformDataset, check_epoch, uniform_item

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


@pytest.mark.parametrize("order", ["sequential", "another-shuffle"])
def test_another_order_of_the_plans_reads_in_the_main_process(tmp_path, order):
    """The DataLoader gets its own order (a SequentialSampler, another
    shuffle), the dataset a planned random one: each plain int index is
    read at its own position in the plan's epoch, as a worker finds it, so
    no read drifts and, with RAM for every item, epoch 2 loads nothing
    (with 0 workers each took the next plan position: every read drifted,
    and epoch 2 loaded about half the items again)."""
    indices = list(range(N)) if order == "sequential" else \
        torch.randperm(N, generator=torch.Generator().manual_seed(9)).tolist()
    for workers in (0, 2):
        counter = CallCounter(tmp_path / f"calls{workers}")
        store, sampler, ds = planned(tmp_path / str(workers), counter, capacity=N)
        loader = torch.utils.data.DataLoader(
            ds, sampler=indices, batch_size=BATCH, num_workers=workers,
            multiprocessing_context="fork" if workers else None)
        try:
            loads = []
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                for epoch in range(2):
                    before = counter.count
                    assert check_epoch(loader, indices * 2, epoch, N, BATCH, uniform_item,
                                       stacked=True) == []
                    loads.append(counter.count - before)
            st = store.stats()
            assert loads == [N, 0], (workers, loads, st)
            assert st["drift"] == 0 and st["accesses"] == 2 * N, st
        finally:
            del loader
            store.close()


def test_direct_unplanned_reads(tmp_path, counter):
    """Indices the plan never reads (it reads the first half) drift: the
    values are right, one warning, stats()['drift'] counts them."""
    store = opt4store.Store(tmp_path / "store", ram_items=N // 4, disk=0)
    sampler = opt4store.PlannedSampler(list(range(N // 2)), epochs=2)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    try:
        order = list(range(N - 1, N // 2 - 1, -1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in order + order:
                got = ds[i]
                assert torch.equal(got, uniform_item(i)), i
        assert len(drift_warnings(caught)) == 1, [str(w.message) for w in caught]
        message = str(drift_warnings(caught)[0].message)
        assert "plan" in message and "drift" in message
        st = store.stats()
        assert st["drift"] == N, st
        assert st["accesses"] == N, st
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
    cost about what planned ones do. The plan reads the first half of the
    items, shuffled: reads of the other half drift (the first half's are
    found at their own positions)."""
    store = opt4store.Store(tmp_path / "store", ram_items=N // 4, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.randperm(N // 2, generator=torch.Generator().manual_seed(3)).tolist(), epochs=2)
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
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
        assert st["drift"] == N // 2, st  # in epoch 1: the plan of 2 x N/2 reads ends there
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


def test_a_planned_sampler_the_dataset_was_not_given_is_warned_about(tmp_path):
    """The loader gets the PlannedSampler, the CachedDataset not: the store
    has no plan, which nothing said (a review found it by its loads)."""
    store = opt4store.Store(tmp_path / "store", ram_items=N // 4, disk=0)
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(N)), epochs=2)
    ds = opt4store.CachedDataset(UniformDataset(N), store)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                assert check_epoch(loader, sampler.plan, _, N, BATCH, uniform_item,
                                   stacked=True) == []
        said = [str(w.message) for w in caught if "made without it" in str(w.message)]
        assert len(said) == 1 and "CachedDataset(dataset, store, sampler)" in said[0], said
    finally:
        store.close()
