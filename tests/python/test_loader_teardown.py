"""opt4store.DataLoader's workers end before their batch slots are taken
again: after a worker's exception caught by the loop (a retry, a notebook
cell run again), and when a loader with persistent workers is dropped
mid-epoch (a new loader each epoch, a step limit)."""

import gc
import multiprocessing
import time

import pytest
import torch
import torch.utils.data

import opt4store
from opt4store import _batch_layout

N = 24
BATCH = 4

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class Flaky(torch.utils.data.Dataset):
    """Item i is full((4,), i). While `failing`, item `bad` raises and every
    other item takes `delay` seconds, so the other worker is still loading
    when the loop gets the error."""

    def __init__(self, bad, delay):
        self.bad, self.delay, self.failing = bad, delay, True

    def __len__(self):
        return N

    def __getitem__(self, i):
        i = int(i)
        if self.failing:
            if i == self.bad:
                raise ValueError(f"item {i} failed")
            time.sleep(self.delay)
        return torch.full((4,), float(i))


def ids(batch):
    return batch[:, 0].long().tolist()


def planned(epochs, seed=5):
    base = torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(seed))
    return opt4store.PlannedSampler(base, epochs=epochs)


def test_a_caught_worker_error_leaves_no_worker_writing_into_later_batches(tmp_path):
    # Before: torch's iterator, held by the exception's reference cycle, kept
    # the failed epoch's other worker running; the next epoch took the slots
    # it still wrote into, and batches the loop held changed under it.
    before = set(multiprocessing.active_children())
    sampler = planned(epochs=2)
    source = Flaky(bad=int(sampler.epoch_ids(0)[1]), delay=0.1)
    store = opt4store.Store(tmp_path / "store", ram_items=2)
    ds = opt4store.CachedDataset(source, store, sampler)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                  multiprocessing_context="fork")
    with pytest.raises(ValueError, match="failed"):
        for _ in loader:
            pass
    assert set(multiprocessing.active_children()) <= before  # joined, not left to the GC
    source.failing = False
    held = list(opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                     multiprocessing_context="fork"))
    order = sampler.epoch_ids(1).tolist()
    assert [ids(b) for b in held] == [order[k:k + BATCH] for k in range(0, N, BATCH)]
    time.sleep(1.0)  # what a worker of the failed epoch would still have written meanwhile
    assert [ids(b) for b in held] == [order[k:k + BATCH] for k in range(0, N, BATCH)]
    store.close()


def test_persistent_loaders_dropped_mid_epoch_give_their_slots_back(tmp_path):
    # A new loader each epoch with persistent_workers=True, the loop ending
    # after a few steps: each dropped loader kept its jobs' slots busy for
    # good, so every later one made more (/dev/shm growing epoch by epoch).
    epochs = 4
    sampler = planned(epochs=epochs)
    store = opt4store.Store(tmp_path / "store", ram_items=2)
    ds = opt4store.CachedDataset(Flaky(bad=-1, delay=0.0), store, sampler)
    made = []
    for epoch in range(epochs):
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                      multiprocessing_context="fork", persistent_workers=True)
        order = sampler.epoch_ids(epoch).tolist()
        for step, batch in enumerate(loader):
            assert ids(batch) == order[step * BATCH:(step + 1) * BATCH]
            if step == 1:
                break
        slots = loader._slots
        del loader, batch
        gc.collect()  # the loader is freed by the collector (it refers to itself)
        assert not slots.busy, f"epoch {epoch}: slots {sorted(slots.busy)} still busy"
        made.append(len(slots.tensors))
    assert made == [made[0]] * epochs, made
    assert len(_batch_layout._slot_cache) == 1
    store.close()


def test_a_new_iteration_ends_the_one_before(tmp_path):
    # A peeked iterator kept while a loop runs: dropping it mid-loop tore
    # down the loop's epoch (its workers, slots and drop_last tail), and
    # the loop failed (AttributeError). One iteration runs at a time now:
    # iter() ends the one before, whose next() then stops.
    sampler = planned(epochs=3)
    store = opt4store.Store(tmp_path / "store", ram_items=4)
    ds = opt4store.CachedDataset(Flaky(bad=-1, delay=0.0), store, sampler)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                  multiprocessing_context="fork", drop_last=True)
    peeked = iter(loader)
    assert ids(next(peeked)) == sampler.epoch_ids(0)[:BATCH].tolist()
    got = []
    for k, batch in enumerate(loader):
        got += ids(batch)
        if k == 1:
            with pytest.raises(StopIteration):
                next(peeked)
            del peeked
    assert got == sampler.epoch_ids(1).tolist()
    assert store.stats()["drift"] == 0
    store.close()
