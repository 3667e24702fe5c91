"""Tensor subclasses (torchvision's tv_tensors, a tensor with attributes)
keep their class and attributes through the store: they go through pickle,
alone or inside a tuple, list or dict, while a plain torch.Tensor keeps the
fast path (no pickle). From the RAM tier, the disk tier, and a reopened
store."""

import warnings

import pytest
import torch

import opt4store
from opt4store import _values
from o4s_testlib import FailingDataset, ListDataset

NO_POSITION = opt4store.store.NO_POSITION


class TaggedTensor(torch.Tensor):
    """A tensor subclass with an attribute, as torchvision's BoundingBoxes
    (module level: pickle names it)."""


def tagged(i):
    t = torch.arange(6, dtype=torch.float32).view(2, 3).add(i).as_subclass(TaggedTensor)
    t.label = f"box {i}"
    return t


def values(i):
    """The values stored for item i: a subclass alone, in a tuple, in a dict."""
    return [tagged(i), (tagged(i), i), {"boxes": tagged(i), "image": torch.ones(2) * i}]


def check_tagged(got, i, where):
    assert type(got) is TaggedTensor, f"{where}: {type(got)}"
    assert got.label == f"box {i}", where
    assert torch.equal(got.as_subclass(torch.Tensor), tagged(i).as_subclass(torch.Tensor)), where


def check(got, i, kind, where):
    """got: values(i)[kind] as read back."""
    if kind == 0:
        check_tagged(got, i, where)
    elif kind == 1:
        assert type(got) is tuple and got[1] == i, where
        check_tagged(got[0], i, where)
    else:
        assert list(got) == ["boxes", "image"], where
        check_tagged(got["boxes"], i, where)
        assert type(got["image"]) is torch.Tensor and torch.equal(got["image"], torch.ones(2) * i)


def test_put_and_get_keep_the_class_and_its_attributes(store_path):
    store = opt4store.Store(store_path, ram_items=16, disk=0)
    store.bind(6, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the pickle warning
            for kind in range(3):
                store.put(NO_POSITION, kind, values(kind)[kind])
        for kind in range(3):
            check(store.get(NO_POSITION, kind), kind, kind, f"get {kind}")
            check(store.peek(kind), kind, kind, f"peek {kind}")
        for kind, got in enumerate(store.get_batch([NO_POSITION] * 3, [0, 1, 2])):
            check(got, kind, kind, f"get_batch {kind}")
    finally:
        store.close()


def test_cached_dataset_keeps_them_from_ram_disk_and_a_reopened_store(store_path):
    n = 12
    items = [values(i)[i % 3] for i in range(n)]
    store = opt4store.Store(store_path, ram_items=3, disk="16MiB")
    try:
        ds = opt4store.CachedDataset(ListDataset(items), store)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for i in range(n):
                check(ds[i], i, i % 3, f"miss {i}")
        for i in range(n):
            check(ds[i], i, i % 3, f"hit {i}")
        st = store.stats()
        assert st["hits_ram"] > 0 and st["hits_disk"] > 0, st
    finally:
        store.close()
    # The spot check compares classes and attributes: the source's are the same.
    store = opt4store.Store(store_path, ram_items=3, disk="16MiB")
    try:
        opt4store.CachedDataset(ListDataset(items), store, spot_check=n)
        ds = opt4store.CachedDataset(FailingDataset(n), store, spot_check=0)
        for i in range(n):
            check(ds[i], i, i % 3, f"reopened {i}")
        assert store.stats()["source_loads"] == 0
    finally:
        store.close()


def test_plain_tensors_keep_the_fast_path(store_path):
    plain, pair = torch.arange(4.0), (torch.arange(3), 2)
    assert _values.structurable(pair) and not _values.structurable((tagged(1), 2))
    store = opt4store.Store(store_path, ram_items=16, disk=0)
    store.bind(4, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no pickle warning
            store.put(NO_POSITION, 0, plain)
            store.put(NO_POSITION, 1, pair)
        with pytest.warns(RuntimeWarning, match="TaggedTensor through pickle"):
            store.put(NO_POSITION, 2, tagged(2))
        assert type(store.get(NO_POSITION, 0)) is torch.Tensor
        got = store.get(NO_POSITION, 1)
        assert type(got[0]) is torch.Tensor and torch.equal(got[0], pair[0]) and got[1] == 2
    finally:
        store.close()


def test_the_spot_check_compares_class_and_attributes():
    other = tagged(1)
    other.label = "another"
    assert _values.same_value(tagged(1), tagged(1))
    assert not _values.same_value(other, tagged(1))
    assert not _values.same_value(tagged(1).as_subclass(torch.Tensor), tagged(1))
    assert not _values.same_value((tagged(1).as_subclass(torch.Tensor), 1), (tagged(1), 1))
    assert _values.same_value(torch.arange(3), torch.arange(3))


def test_a_cluster_host_serves_a_subclass_pickled():
    from opt4store import _core
    from opt4store.cluster import raw_value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the pickle warning
        tag = _core.decode_header(raw_value(tagged(1))[0])[2]
    assert tag == _values.TAG_PICKLE
    assert _core.decode_header(raw_value(torch.arange(3))[0])[2] == _values.TAG_TENSOR


def local_tagged():
    class Local(torch.Tensor):
        """Defined inside a function: pickle cannot name it."""

    t = torch.arange(3.0).as_subclass(Local)
    t.label = "local"
    return t


def test_a_subclass_pickle_cannot_name_is_kept_as_a_plain_tensor(store_path):
    # As a container class pickle cannot name: its plain base type, a warning.
    store = opt4store.Store(store_path, ram_items=16, disk=0)
    store.bind(4, None)
    try:
        with pytest.warns(RuntimeWarning, match="plain torch.Tensor"):
            store.put(NO_POSITION, 0, local_tagged())
            store.put(NO_POSITION, 1, (local_tagged(), 1))
        got = store.get(NO_POSITION, 0)
        assert type(got) is torch.Tensor and torch.equal(got, torch.arange(3.0))
        got = store.get(NO_POSITION, 1)
        assert type(got[0]) is torch.Tensor and torch.equal(got[0], torch.arange(3.0))
        # ... and the spot check takes it for what was loaded.
        assert _values.same_value(store.get(NO_POSITION, 0), local_tagged())
        assert _values.same_value(store.get(NO_POSITION, 1), (local_tagged(), 1))
    finally:
        store.close()
