"""Values a real dataset returns that the store once got wrong: a leaf with
no elements (a detection sample without boxes), conjugate and negative
views sent back by a worker, sparse tensors, numpy array subclasses
(MaskedArray keeps its mask), tensor subclasses without attributes and
plain tensors with some, big-endian arrays, NaN numpy scalars at the
spot check, and samples whose non-tensor parts outgrow the store's 64 KiB
meta (token ids in a list, a long caption): they go whole by pickle. Each
is read back (a miss, then a hit) and batched as torch's DataLoader does.
An item that is None (a dataset's way to skip a bad file, with a
collate_fn that drops it) is a value like any other: stored once, then a
hit. What `opt4store import` stores reads back as its source gives it."""

import multiprocessing
import subprocess
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import MadeDataset, assert_same

N = 8
BATCH = 4

pytestmark = pytest.mark.filterwarnings("ignore:opt4store. caching:RuntimeWarning")


class Sub(torch.Tensor):
    """A tensor subclass with no attributes of its own."""


def no_boxes(i):
    return torch.full((2,), float(i)), np.zeros((0, 4), np.float32)


def views(i):
    z = torch.full((2,), i + 1j, dtype=torch.complex64).conj()
    return z, (torch.arange(2.0) + 1 + i)._neg_view()


def masked(i):
    return np.ma.masked_array([float(i), 1.0], mask=[False, True])


def subclass(i):
    return (torch.zeros(2) + i).as_subclass(Sub), i


def noted(i):
    t = torch.full((2,), float(i))
    t.note = f"item {i}"
    return t


def big_endian(i):
    return np.arange(3, dtype=">f4") + i, i


def nan_label(i):
    return torch.full((2,), float(i)), np.float32("nan")


def token_ids(i):  # what a tokenizer gives: 2048 ints in a list, beside a label
    return {"input_ids": [(i * 7 + k) % 30000 for k in range(2048)], "label": i}


def long_text(i):  # an image with its caption of 70 000 characters
    return torch.full((2,), float(i)), "word " * 14000


def loaded_twice(tmp_path, make, name="store"):
    """(the value of a miss, of a hit) for every item, through a CachedDataset."""
    store = opt4store.Store(tmp_path / name, ram_items=2, disk="16MiB")  # hits from disk too
    try:
        ds = opt4store.CachedDataset(MadeDataset(make, N), store)
        return [ds[i] for i in range(N)], [ds[i] for i in range(N)]
    finally:
        store.close()


@pytest.mark.parametrize("make", [no_boxes, views, masked, subclass, noted, big_endian,
                                  token_ids, long_text])
def test_a_hit_gives_back_what_the_dataset_gave(tmp_path, make):
    misses, hits = loaded_twice(tmp_path, make)
    for i in range(N):
        expected = make(i)
        if make is views:  # the store keeps a view's values, not its lazy bit
            expected = tuple(t.resolve_conj().resolve_neg() for t in expected)
        assert_same(misses[i], expected, f"miss {i}")
        if make is big_endian:  # kept little-endian: same values, native order
            assert hits[i][0].dtype == np.dtype("<f4")
            assert np.array_equal(hits[i][0], expected[0]) and hits[i][1] == i
        else:
            assert_same(hits[i], expected, f"hit {i}")
    if make is masked:
        assert isinstance(hits[0], np.ma.MaskedArray) and hits[0].mask.tolist() == [False, True]
    if make is subclass:
        assert type(hits[0][0]) is Sub
    if make is noted:
        assert hits[3].note == "item 3"


def test_sparse_tensors_are_stored_and_batched(tmp_path):
    def sparse(i):
        return (torch.eye(3) * (i + 1)).to_sparse(), i

    misses, hits = loaded_twice(tmp_path, sparse)
    for i in range(N):
        assert hits[i][0].is_sparse and hits[i][1] == i
        assert torch.equal(hits[i][0].to_dense(), sparse(i)[0].to_dense())
        assert torch.equal(misses[i][0].to_dense(), sparse(i)[0].to_dense())


@pytest.mark.parametrize("make", [no_boxes, views, token_ids, long_text])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_torchs(tmp_path, make, workers):
    expected = list(torch.utils.data.DataLoader(MadeDataset(make, N), batch_size=BATCH))
    if make is views:
        expected = [[t.resolve_conj().resolve_neg() for t in b] for b in expected]
    store = opt4store.Store(tmp_path / "store", ram_items=2 * N, disk="16MiB")
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(N)), epochs=2)
    loader = opt4store.DataLoader(opt4store.CachedDataset(MadeDataset(make, N), store, sampler),
                                  sampler=sampler, batch_size=BATCH, num_workers=workers,
                                  multiprocessing_context="fork" if workers else None)
    try:
        for epoch in range(2):  # misses (the first sample in a worker), then hits
            got = list(loader)
            assert len(got) == len(expected)
            for k, (g, e) in enumerate(zip(got, expected)):
                assert_same(list(g), list(e), f"epoch {epoch} batch {k}")
    finally:
        store.close()


@pytest.mark.parametrize("make", [subclass, nan_label])
def test_the_spot_check_at_a_reopen_passes(tmp_path, make):
    loaded_twice(tmp_path, make)
    store = opt4store.Store(tmp_path / "store", ram_items=2, disk="16MiB")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # "not deterministic" would fail
            warnings.filterwarnings("ignore", "opt4store. caching", RuntimeWarning)
            ds = opt4store.CachedDataset(MadeDataset(make, N), store, spot_check=N)
        assert len(ds) == N
    finally:
        store.close()


def none_for_odd(i):  # odd items stand for unreadable files
    return None if i % 2 else torch.full((2,), float(i))


class CountedLoads(MadeDataset):
    """MadeDataset that counts its loads, in forked workers too."""

    def __init__(self, make, n):
        super().__init__(make, n)
        self.loads = multiprocessing.Value("i", 0)

    def __getitem__(self, i):
        with self.loads.get_lock():
            self.loads.value += 1
        return super().__getitem__(i)


def without_none(batch):
    return torch.utils.data.default_collate([v for v in batch if v is not None])


@pytest.mark.parametrize("how,workers", [("get", 0), ("torch", 0), ("torch", 2),
                                         ("opt4store", 0), ("opt4store", 2)])
def test_a_stored_none_is_a_hit(tmp_path, how, workers):
    store = opt4store.Store(tmp_path / "store", ram_items=2 * N)
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(N)), epochs=2)
    source = CountedLoads(none_for_odd, N)
    ds = opt4store.CachedDataset(source, store, sampler)
    kind = {"torch": torch.utils.data.DataLoader, "opt4store": opt4store.DataLoader}.get(how)
    loader = kind and kind(ds, sampler=sampler, batch_size=BATCH, num_workers=workers,
                           collate_fn=without_none,
                           multiprocessing_context="fork" if workers else None)
    try:
        assert store.peek(1, default="absent") == "absent"
        for epoch in range(2):
            got = [ds[i] for i in range(N)] if how == "get" else \
                [v for batch in loader for v in batch]
            expected = [v for v in map(none_for_odd, range(N)) if how == "get" or v is not None]
            assert len(got) == len(expected)
            for k, (g, e) in enumerate(zip(got, expected)):
                assert_same(g, e, f"epoch {epoch} value {k}")
        if workers:
            store.wait_for_puts(10)
        assert source.loads.value == N  # each item once, in epoch 1; epoch 2 hit them all
        assert store.peek(1, default="absent") is None
    finally:
        store.close()


def test_what_the_cli_imports_reads_back_as_the_source_gives_it(tmp_path, opt4store_cli):
    """`opt4store import`: a row of an .npy file comes back as np.load's row
    (it came back a flat uint8 tensor, so the spot check called the store
    stale), a file as its bytes."""
    rows = (np.arange(N * 6, dtype=np.float32) / 7).reshape(N, 2, 3)
    np.save(tmp_path / "rows.npy", rows)
    files = tmp_path / "files"
    files.mkdir()
    contents = [bytes([i]) * (i + 5) for i in range(N)]
    for i, data in enumerate(contents):
        (files / f"f{i}.bin").write_bytes(data)
    for name, source in [("rows-store", "rows.npy"), ("files-store", "files")]:
        for args in (["create", name, "--dataset-size", str(N), "--disk", "1MiB"],
                     ["import", name, "--from", source]):
            subprocess.run([opt4store_cli, *args], cwd=tmp_path, check=True, capture_output=True)
    for name, source in [("rows-store", rows), ("files-store", contents)]:
        store = opt4store.Store(tmp_path / name)
        try:
            ds = opt4store.CachedDataset(source, store, spot_check=N)
            for i in range(N):
                assert_same(ds[i], source[i], f"{name} {i}")
            assert store.stats()["hits_disk"] + store.stats()["hits_ram"] == N
        finally:
            store.close()
