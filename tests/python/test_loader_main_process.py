"""With workers, opt4store.DataLoader never calls the Dataset in the main
process, as torch's DataLoader does not: a handle that a Dataset opens on
first use (h5py's and LMDB's advice) is then opened in each worker, never
in the parent, whose forked workers would inherit it. The epoch's first
sample, when the store lacks it, is loaded in a worker (or its layout read
from another sample the store holds), drop_last's tail misses start the
workers, and the CachedDataset's spot check loads from a copy."""

import os

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import CallCounter, assert_same

N = 40
NUMEL = 12
ROW_BYTES = NUMEL * 4
BATCH = 8

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def item(i):
    return torch.arange(NUMEL, dtype=torch.float32) + 100 * int(i), int(i) % 7


class LazySource(torch.utils.data.Dataset):
    """item(i), read from a file through a handle opened on first use in
    each process. Counts the calls made in the process that made it; a
    handle used in another process than the one that opened it (inherited
    through fork) raises."""

    def __init__(self, path, counter):
        self.path = os.fspath(path)
        with open(self.path, "wb") as f:
            for i in range(N):
                f.write(item(i)[0].numpy().tobytes())
        self.counter = counter
        self.parent = os.getpid()
        self.handle = None
        self.opened_in = None

    def __len__(self):
        return N

    def __getitem__(self, i):
        if os.getpid() == self.parent:
            self.counter.hit()
        if self.handle is None:
            self.handle = open(self.path, "rb")
            self.opened_in = os.getpid()
        elif self.opened_in != os.getpid():
            raise RuntimeError(f"a handle opened in process {self.opened_in} used in "
                               f"process {os.getpid()}")
        data = os.pread(self.handle.fileno(), ROW_BYTES, int(i) * ROW_BYTES)
        return torch.from_numpy(np.frombuffer(data, dtype=np.float32).copy()), int(i) % 7

    def __getstate__(self):
        state = dict(self.__dict__)
        state["handle"] = state["opened_in"] = None  # a file object does not pickle
        return state


def open_store(path):
    return opt4store.Store(path, ram_items=N, disk="16MiB")


def fill(path, indices, source):
    """A store at `path` that holds `indices` (loaded in this process)."""
    store = open_store(path)
    sampler = opt4store.PlannedSampler(list(indices), 1)
    for _ in opt4store.DataLoader(opt4store.CachedDataset(source, store, sampler),
                                  batch_size=BATCH, sampler=sampler):
        pass
    store.close()


def doubled(value):
    return value[0] * 2, value[1]


def read_epoch(store, source, order, transform=None, **kwargs):
    """One epoch of `order` through opt4store.DataLoader with 2 workers,
    checked batch by batch against the items."""
    sampler = opt4store.PlannedSampler(list(order), 1)
    ds = opt4store.CachedDataset(source, store, sampler, transform=transform)
    loader = opt4store.DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=2, **kwargs)
    got = list(loader)
    transform = transform or (lambda value: value)
    expected = [torch.utils.data.default_collate([transform(item(i)) for i in order[k:k + BATCH]])
                for k in range(0, len(order), BATCH)]
    if kwargs.get("drop_last") and len(order) % BATCH:
        expected.pop()
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert_same(g, e, f"batch {k}")


@pytest.mark.parametrize("context, transform", [("fork", None), ("spawn", None),
                                                ("fork", doubled)])
def test_a_cold_epoch_loads_its_first_sample_in_a_worker(tmp_path, context, transform):
    counter = CallCounter(tmp_path / "calls")
    source = LazySource(tmp_path / "items", counter)
    store = open_store(tmp_path / "s")
    try:
        read_epoch(store, source, np.random.default_rng(1).permutation(N), transform,
                   multiprocessing_context=context)
        assert source.handle is None and counter.count == 0
        assert store.stats()["source_loads"] == N  # the first sample once, in its worker
    finally:
        store.close()


def test_a_first_sample_the_store_lacks_takes_its_layout_from_another(tmp_path):
    counter = CallCounter(tmp_path / "calls")
    source = LazySource(tmp_path / "items", counter)
    fill(tmp_path / "s", range(N // 2), source)
    source.handle = None  # as in a new run
    counter.reset()
    store = open_store(tmp_path / "s")
    try:
        order = np.arange(N)[::-1].copy()  # the first, N - 1, is not held
        read_epoch(store, source, order, multiprocessing_context="fork")
        # Only the spot check's two loads here, from a copy: no handle left open.
        assert source.handle is None and counter.count == 2
        assert store.stats()["source_loads"] == N - N // 2
    finally:
        store.close()


def test_drop_last_tail_misses_load_in_workers(tmp_path):
    counter = CallCounter(tmp_path / "calls")
    source = LazySource(tmp_path / "items", counter)
    order = np.random.default_rng(2).permutation(N - 3)  # 32 in batches, 5 in the tail
    tail = order[-(len(order) % BATCH):]
    fill(tmp_path / "s", order[:-len(tail)], source)
    source.handle = None
    counter.reset()
    store = open_store(tmp_path / "s")
    try:
        read_epoch(store, source, order, drop_last=True, multiprocessing_context="fork")
        assert source.handle is None and counter.count == 2  # the spot check's
        store.wait_for_puts()
        assert (store.locate(tail) != 0).all()  # loaded for the next epochs, by a worker
        assert store.stats()["source_loads"] == len(tail)
    finally:
        store.close()


def test_rows_let_go_after_they_were_found_load_in_a_worker(tmp_path, monkeypatch):
    """A row the store held when the epoch began but let go before its read
    (forced here: locate says every index is held, so no job loads any) is
    loaded in a worker too, without a second read."""
    counter = CallCounter(tmp_path / "calls")
    source = LazySource(tmp_path / "items", counter)
    store = open_store(tmp_path / "s")
    try:
        monkeypatch.setattr(store, "locate", lambda indices: np.ones(len(indices), np.uint8))
        read_epoch(store, source, np.random.default_rng(3).permutation(N),
                   multiprocessing_context="fork")
        assert source.handle is None and counter.count == 0
        st = store.stats()
        assert st["source_loads"] == N and st["accesses"] == N, st  # each read once
    finally:
        store.close()
