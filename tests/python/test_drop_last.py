"""drop_last with opt4store.DataLoader (issue 14): the tail that no batch
holds (the last partial batch) is loaded into the store in the epoch that
drops it, as the run without drop_last loads it, so that the next epochs
load nothing from the source; the batches stay torch's; and a loop that
breaks off early loads none of the tail."""

import time

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import CallCounter, assert_same

N = 60
BATCH = 8    # 60 = 7 x 8 + 4: drop_last leaves 4 positions of each epoch unread
SEED = 5

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class Source(torch.utils.data.Dataset):
    """Sample i is a row of i's (its index is in it), loads counted across
    processes."""

    def __init__(self, counter=None):
        self.counter = counter

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.counter is not None:
            self.counter.hit()
        return torch.full((16,), int(i), dtype=torch.int64)


def cached(path, epochs, counter=None):
    # The disk tier holds every sample; RAM a third of them.
    store = opt4store.Store(path, ram_items=N // 3, disk="4MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(SEED)),
        epochs=epochs)
    return store, sampler, opt4store.CachedDataset(Source(counter), store, sampler)


def first_epoch_order():
    """The order of epoch 1 (RandomSampler's first permutation)."""
    return torch.randperm(N, generator=torch.Generator().manual_seed(SEED)).tolist()


def held(store, indices, timeout=5.0):
    """store.peek of each index (None: not held), once the Puts in flight
    (a worker's go to the owner on a queue, then to the disk tier) had time
    to land."""
    deadline = time.monotonic() + timeout
    while True:
        values = [store.peek(i) for i in indices]
        if all(v is not None for v in values) or time.monotonic() > deadline:
            return values
        time.sleep(0.02)


WORKERS = [(0, False), (2, False), (2, True)]


def loader_kwargs(num_workers, persistent):
    if num_workers == 0:
        return {}
    return dict(num_workers=num_workers, persistent_workers=persistent,
                multiprocessing_context="fork")


@pytest.mark.parametrize("num_workers, persistent", WORKERS)
def test_tail_is_stored_in_its_epoch_and_later_epochs_load_nothing(tmp_path, num_workers,
                                                                   persistent):
    counter = CallCounter(tmp_path / "calls")
    store, sampler, ds = cached(tmp_path / "ours", 3, counter)
    t_store, t_sampler, t_ds = cached(tmp_path / "theirs", 3)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True,
                                  **loader_kwargs(num_workers, persistent))
    tail = first_epoch_order()[N // BATCH * BATCH:]
    assert len(tail) == N % BATCH
    loads = []
    for epoch in range(3):
        expected = list(torch.utils.data.DataLoader(t_ds, sampler=t_sampler, batch_size=BATCH,
                                                    drop_last=True))
        got = list(loader)
        assert len(got) == len(expected) == N // BATCH
        for k, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"epoch {epoch} batch {k}")
        if epoch == 0:
            # The dropped samples were never yielded, yet they are stored.
            assert not set(tail) & {int(i) for b in got for i in b[:, 0]}
            for i, value in zip(tail, held(store, tail)):
                assert value is not None and torch.equal(value, Source()[i]), (i, value)
            # torch's DataLoader over the same plan leaves them for epoch 2.
            assert all(t_store.peek(i) is None for i in tail)
        loads.append(counter.count - sum(loads))
    st = store.stats()
    # Every sample once, all in epoch 1: epochs 2 and 3 load nothing.
    assert loads == [N, 0, 0], loads
    assert st["source_loads"] == N, st
    assert st["expect_timeouts"] == 0 and st["drift"] == 0, st
    assert st["position"] == 3 * N, st  # every tail read or passed: the plan's end
    store.close()
    t_store.close()


@pytest.mark.parametrize("num_workers, persistent", WORKERS)
def test_a_loop_that_breaks_early_loads_none_of_the_tail(tmp_path, num_workers, persistent):
    counter = CallCounter(tmp_path / "calls")
    store, sampler, ds = cached(tmp_path / "s", 2, counter)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True,
                                  **loader_kwargs(num_workers, persistent))
    order = first_epoch_order()
    for k, batch in enumerate(loader):
        assert batch[:, 0].tolist() == order[k * BATCH:(k + 1) * BATCH]
        if k == 1:
            break
    loaded = counter.count
    if num_workers == 0:
        assert loaded == 2 * BATCH  # the two batches read, nothing else
    else:
        # The workers fetch ahead (prefetch_factor 2: at most 4 jobs past
        # the loop), never as far as the tail 5 batches on.
        assert 2 * BATCH <= loaded <= (2 + 2 * num_workers) * BATCH, loaded
    time.sleep(0.2)  # Puts in flight land (as in held())
    tail = order[N // BATCH * BATCH:]
    assert all(store.peek(i) is None for i in tail)
    # The next epoch runs whole, its samples right, without waits.
    second = list(loader)
    assert len(second) == N // BATCH
    for batch in second:
        assert torch.equal(batch, batch[:, :1].expand(-1, 16))
    st = store.stats()
    assert st["expect_timeouts"] == 0, st
    store.close()


def test_resume_after_the_last_batch_starts_the_next_epoch(tmp_path):
    """A state_dict taken at the last batch (before the tail is loaded)
    resumes at the next epoch, and the tail was loaded all the same."""
    counter = CallCounter(tmp_path / "calls")
    store, sampler, ds = cached(tmp_path / "s", 2, counter)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True)
    state = None
    for batch in loader:
        state = loader.state_dict()
    assert state["sampler"]["epoch"] == 1 and state["sampler"]["index"] == 0, state
    assert counter.count == N
    store.close()
    store, sampler, ds = cached(tmp_path / "s", 2, counter)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True)
    loader.load_state_dict(state)
    rest = list(loader)
    assert len(rest) == N // BATCH
    assert counter.count == N + 2  # the reopened store's spot check only
    assert np.unique(torch.cat(rest)[:, 0].numpy()).size == N // BATCH * BATCH
    store.close()
