"""The batch read path of torch's DataLoader over a CachedDataset:
__getitems__ reads a batch with one call into the store, and transform=
runs after the cache on every read."""

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, assert_same, uniform_item

N = 64
BATCH = 8

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _planned(epochs, seed=5):
    return opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(seed)),
        epochs=epochs)


def add_one(value):
    return value + 1


def noisy(value):
    """A random augmentation: differs on every call."""
    return value + torch.rand(())


def check_two_epochs(ds, sampler, num_workers, expected):
    """Two epochs of torch's DataLoader over ds, each batch against
    expected(index) stacked."""
    kwargs = dict(multiprocessing_context="fork") if num_workers else {}
    for epoch in range(2):
        loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                             num_workers=num_workers, **kwargs)
        for b, batch in enumerate(loader):
            ids = sampler.plan[epoch * N + b * BATCH:epoch * N + (b + 1) * BATCH]
            assert_same(batch, torch.stack([expected(i) for i in ids]), f"batch {b}")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_reads_whole_batches(tmp_path, counter, num_workers):
    store = opt4store.Store(tmp_path / "store", ram_items=N // 2, disk="16MiB")
    sampler = _planned(epochs=2)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    check_two_epochs(ds, sampler, num_workers, uniform_item)
    st = store.stats()
    assert counter.count == N  # each item loaded once: epoch 2 all from the store
    assert st["accesses"] == 2 * N and st["source_loads"] == N, st
    assert st["drift"] == 0, st
    store.close()


def test_getitems_is_one_store_call_per_batch(tmp_path):
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    sampler = _planned(epochs=1)
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
    calls = []
    get_batch = store.get_batch

    def spy(positions, indices, **kwargs):
        calls.append(len(indices))
        return get_batch(positions, indices, **kwargs)

    store.get_batch = spy
    batches = list(torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH))
    assert len(batches) == N // BATCH
    assert calls == [BATCH] * (N // BATCH)
    store.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_transform_runs_after_the_cache(tmp_path, num_workers):
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    sampler = _planned(epochs=2)
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler, transform=add_one)
    check_two_epochs(ds, sampler, num_workers, lambda i: uniform_item(i) + 1)
    # The store keeps the untransformed value.
    assert_same(store.get(opt4store.NO_POSITION, 3), uniform_item(3))
    assert store.stats()["source_loads"] == N
    store.close()


def test_random_transform_differs_on_every_read(tmp_path):
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    ds = opt4store.CachedDataset(UniformDataset(N), store, transform=noisy)
    first = [ds[i] for i in range(8)]
    second = [ds[i] for i in range(8)]
    for i in range(8):
        assert not torch.equal(first[i], second[i]), i
        assert torch.all((first[i] - uniform_item(i) >= 0) & (first[i] - uniform_item(i) < 1))
    store.close()


def test_transform_must_be_callable(tmp_path):
    store = opt4store.Store(tmp_path / "store", ram_items=4, disk=0)
    with pytest.raises(TypeError):
        opt4store.CachedDataset(UniformDataset(4), store, transform="flip")
    store.close()
