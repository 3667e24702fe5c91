"""opt4store.DataLoader's workers as torch's: get_worker_info().dataset is
the CachedDataset (its .dataset the user's, where a worker_init_fn sets up
per-worker state), persistent_workers=True starts the workers once on the
general path too, multiprocessing_context is checked when the loader is
made and kept as a context, as torch does, and set_epoch reaches a
DistributedSampler inside a batch sampler."""

import functools
import multiprocessing
import os
import pickle

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from opt4store import _batch_layout
from opt4store._loader_jobs import Filler
from o4s_testlib import CallCounter, assert_same, keep_list, uniform_item

N = 40
NUMEL = 12
ROW_BYTES = NUMEL * 4

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def write_items(path):
    with open(path, "wb") as f:
        for i in range(N):
            f.write(uniform_item(i, NUMEL).numpy().tobytes())


class FileSource(torch.utils.data.Dataset):
    """Items read from a file through a handle that worker_init_fn opens in
    each worker (h5py's pattern: a handle is not shared across processes);
    the main process opens its own when it needs one."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.handle = None

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.handle is None:
            if torch.utils.data.get_worker_info() is not None:
                raise RuntimeError("worker_init_fn did not open this worker's handle")
            self.handle = open(self.path, "rb")
        data = os.pread(self.handle.fileno(), ROW_BYTES, int(i) * ROW_BYTES)
        return torch.from_numpy(np.frombuffer(data, dtype=np.float32).copy()), int(i) % 5

    def __getstate__(self):
        state = dict(self.__dict__)
        state["handle"] = None  # a file object does not pickle (spawn workers)
        return state


def open_worker_handle(worker_id):
    source = torch.utils.data.get_worker_info().dataset.dataset
    source.handle = open(source.path, "rb")


def count_and_open(counter, worker_id):
    counter.hit()
    open_worker_handle(worker_id)


def cached(path, source, epochs):
    store = opt4store.Store(path, ram_items=N // 3, disk="16MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(3)),
        epochs=epochs)
    return store, sampler, opt4store.CachedDataset(source, store, sampler)


def compare_kept_loaders(tmp_path, source, epochs, **kwargs):
    """Batches of one torch DataLoader and one opt4store.DataLoader, each
    kept for every epoch, over twin stores: equal, epoch by epoch."""
    stores, loaders = [], []
    for name, make in (("a", torch.utils.data.DataLoader), ("b", opt4store.DataLoader)):
        store, sampler, ds = cached(tmp_path / name, source, epochs)
        stores.append(store)
        loaders.append(make(ds, sampler=sampler, **kwargs))
    try:
        for epoch in range(epochs):
            expected = list(loaders[0])
            got = list(loaders[1])
            assert len(got) == len(expected), (epoch, len(got), len(expected))
            for k, (g, e) in enumerate(zip(got, expected)):
                assert_same(g, e, f"epoch {epoch} batch {k}")
        return [store.stats() for store in stores]
    finally:
        del loaders
        for store in stores:
            store.close()


# ---------------------------------------------------------------- get_worker_info().dataset


@pytest.mark.parametrize("context, persistent", [("fork", False), ("spawn", True)])
def test_worker_init_fn_sets_up_the_users_dataset(tmp_path, context, persistent):
    write_items(tmp_path / "items")
    theirs, ours = compare_kept_loaders(
        tmp_path, FileSource(tmp_path / "items"), epochs=2, batch_size=8, num_workers=2,
        multiprocessing_context=context, persistent_workers=persistent,
        worker_init_fn=open_worker_handle)
    assert ours["source_loads"] > 0, ours  # the workers loaded misses


def test_the_workers_dataset_stands_in_for_the_cached_dataset(tmp_path):
    store, sampler, ds = cached(tmp_path / "s", FileSource(tmp_path / "items"), epochs=1)
    try:
        layout = _batch_layout.layout_of((torch.zeros(NUMEL), 0))
        filler = Filler(ds, layout, [])
        assert filler.dataset is ds.dataset and filler.store is ds.store
        assert len(filler) == len(ds)
        filler.tag = "set in a worker"
        assert ds.tag == "set in a worker"
        del filler.tag
        assert not hasattr(ds, "tag")
        with pytest.raises(AttributeError):
            filler.no_such_attribute
        copy = pickle.loads(pickle.dumps(filler))  # as for spawn workers
        assert copy.dataset.path == ds.dataset.path and len(copy) == N
    finally:
        store.close()


# ---------------------------------------------------------------- persistent workers


@pytest.mark.parametrize("batch_size, collate_fn", [(8, keep_list), (None, None)])
def test_persistent_workers_start_once_on_the_general_path(tmp_path, batch_size, collate_fn):
    write_items(tmp_path / "items")
    counters = [CallCounter(tmp_path / "theirs"), CallCounter(tmp_path / "ours")]
    stores, loaders = [], []
    for name, make, counter in (("a", torch.utils.data.DataLoader, counters[0]),
                                ("b", opt4store.DataLoader, counters[1])):
        store, sampler, ds = cached(tmp_path / name, FileSource(tmp_path / "items"), epochs=3)
        stores.append(store)
        loaders.append(make(ds, sampler=sampler, batch_size=batch_size, collate_fn=collate_fn,
                            num_workers=2, multiprocessing_context="fork",
                            persistent_workers=True,
                            worker_init_fn=functools.partial(count_and_open, counter)))
    try:
        for epoch in range(3):
            expected = list(loaders[0])
            got = list(loaders[1])
            assert len(got) == len(expected) == len(loaders[1]), epoch
            for k, (g, e) in enumerate(zip(got, expected)):
                assert_same(g, e, f"epoch {epoch} batch {k}")
        assert counters[0].count == 2
        assert counters[1].count == 2  # not 2 an epoch
    finally:
        del loaders
        for store in stores:
            store.close()


# ---------------------------------------------------------------- multiprocessing_context


@pytest.fixture
def dataset(tmp_path):
    store, sampler, ds = cached(tmp_path / "s", FileSource(tmp_path / "items"), epochs=1)
    yield ds
    store.close()


@pytest.mark.parametrize("context", ["spawn", "no_such_method", 3,
                                     multiprocessing.get_context("fork")])
def test_a_context_without_workers_is_refused(dataset, context):
    with pytest.raises(opt4store.InvalidArgumentError, match="num_workers > 0"):
        opt4store.DataLoader(dataset, multiprocessing_context=context)


def test_an_unknown_start_method_is_refused(dataset):
    with pytest.raises(opt4store.InvalidArgumentError, match="'fork'"):
        opt4store.DataLoader(dataset, num_workers=2, multiprocessing_context="frok")


@pytest.mark.parametrize("context", [3, b"fork", multiprocessing])
def test_a_context_of_another_type_is_refused(dataset, context):
    with pytest.raises(opt4store.InvalidTypeError, match="multiprocessing context"):
        opt4store.DataLoader(dataset, num_workers=2, multiprocessing_context=context)


@pytest.mark.parametrize("context", [None, multiprocessing.get_context("spawn"),
                                     torch.multiprocessing.get_context("fork")])
def test_a_start_method_or_a_context_is_taken(dataset, context):
    loader = opt4store.DataLoader(dataset, num_workers=2, multiprocessing_context=context)
    assert loader.multiprocessing_context is context


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_start_methods_name_is_kept_as_its_context(dataset, method):
    theirs = torch.utils.data.DataLoader(dataset, num_workers=2, multiprocessing_context=method)
    ours = opt4store.DataLoader(dataset, num_workers=2, multiprocessing_context=method)
    assert ours.multiprocessing_context is theirs.multiprocessing_context
    assert ours.multiprocessing_context is multiprocessing.get_context(method)


# ---------------------------------------------------------------- set_epoch


@pytest.mark.filterwarnings("ignore:.*not what the plan predicted:RuntimeWarning")
@pytest.mark.parametrize("wrap", ["sampler", "batch_sampler"])
def test_set_epoch_reaches_a_distributed_sampler(tmp_path, dataset, wrap):
    write_items(tmp_path / "items")
    inner = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0)
    kwargs = {"sampler": inner, "batch_size": 4} if wrap == "sampler" else \
        {"batch_sampler": torch.utils.data.BatchSampler(inner, 4, drop_last=False)}
    loader = opt4store.DataLoader(dataset, **kwargs)
    loader.set_epoch(3)
    assert inner.epoch == 3
    first = [b.tolist() for b, _ in loader]
    loader.set_epoch(4)
    assert inner.epoch == 4 and [b.tolist() for b, _ in loader] != first  # reshuffled
