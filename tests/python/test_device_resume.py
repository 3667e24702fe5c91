"""state_dict() under a DeviceLoader (opt4store.DataLoader(device=...) and
to_device(loader)): the DeviceLoader stages batches ahead of the loop (up
to depth on its background thread), and a batch staged but not yet handed
to the loop must not count, or a checkpoint taken in the loop's body would
resume past batches never trained on. Tested without a GPU on _paced, the
DeviceLoader's staging, with the identity as its stage and its thread
always on (_Pace(rule=False)), as the CUDA path drives it.
"""

import contextlib
import time

import pytest
import torch

import opt4store
from opt4store.device import _handed, _Pace, _paced
from o4s_testlib import assert_resumes_after, record_run, UniformDataset

N, BATCH, EPOCHS = 40, 4, 2
PER_EPOCH = N // BATCH


def cached(path):
    store = opt4store.Store(path, ram_items=N, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(5)),
        epochs=EPOCHS)
    return store, sampler, opt4store.CachedDataset(UniformDataset(N, numel=8), store, sampler)


def reference(tmp_path):
    """A plain loader's batches over every epoch, and its state_dict taken in
    the loop's body at each batch."""
    store, sampler, ds = cached(tmp_path / "reference")
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH)
    batches, states = record_run(loader, loader.state_dict, EPOCHS)
    store.close()
    return batches, states


def loader_and_source(ds, sampler, how):
    """A loader and what a DeviceLoader iterates for it: to_device(loader)'s
    is the loader itself; DataLoader(device=...)'s, its OwnBatches (built
    without touching CUDA)."""
    if how == "to_device":
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH)
        return loader, loader
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, device="cuda")
    return loader, loader._on_device.loader


def paced_state_at(loader, source, stop):
    """The state_dict taken in the loop's body at batch `stop` (counted over
    every epoch) of a loop that gets its batches as the CUDA path does,
    the thread staging up to 2 ahead while the loop's step sleeps."""
    seen = 0
    for _ in range(EPOCHS):
        iterator, hand = _handed(source)
        with contextlib.closing(_paced(iterator, lambda b: b, 2, _Pace(rule=False), hand)) as it:
            for _batch in it:
                time.sleep(0.01)  # the thread fills its queue meanwhile
                if seen == stop:
                    return loader.state_dict()
                seen += 1
    raise AssertionError(f"no batch {stop}")


@pytest.mark.parametrize("how", ["to_device", "device="])
def test_state_dict_counts_only_the_batches_handed_to_the_loop(tmp_path, how):
    batches, states = reference(tmp_path)
    for stop in (0, 1, 4, PER_EPOCH - 1, PER_EPOCH, PER_EPOCH + 3, 2 * PER_EPOCH - 1):
        path = tmp_path / f"run{stop}"
        store, sampler, ds = cached(path)
        loader, source = loader_and_source(ds, sampler, how)
        state = paced_state_at(loader, source, stop)
        assert state == states[stop], f"state at batch {stop}"
        store.close()
        # A new process's view: resumed from the state, the rest, exactly.
        store, sampler, ds = cached(path)
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH)
        loader.load_state_dict(state)
        assert_resumes_after(loader, batches, stop)
        store.close()


def test_an_epoch_of_no_batch_counts_at_once(tmp_path):
    # drop_last with a batch larger than the epoch: no batch reaches the
    # loop, so nothing would hand the epoch's count; it counts at once.
    store, sampler, ds = cached(tmp_path / "store")
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=N + 1, drop_last=True)
    iterator, hand = _handed(loader)
    assert list(_paced(iterator, lambda b: b, 2, _Pace(rule=False), hand)) == []
    assert loader.state_dict()["sampler"]["epoch"] == 1
    assert loader.state_dict()["sampler"]["index"] == 0
    store.close()
