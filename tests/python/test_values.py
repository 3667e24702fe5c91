"""Values: what CachedDataset returns equals what the source returned (same
type, dtype, shape and values), as a fresh object, for tensors of every
dtype and shape, numpy arrays, nested structures, pickled objects and
items of varying sizes; from the RAM tier and from the disk tier."""

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import opt4store
from o4s_testlib import (FailingDataset, ListDataset, Point, VariableDataset, assert_same,
                         child_env, run_child, variable_item)

TORCH_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.float32, torch.float64, torch.bfloat16, torch.bool, torch.complex64,
                torch.complex128]
SHAPES = [(), (7,), (2, 3, 4, 5), (0,), (3, 0, 2)]


def make_tensor(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=dtype)


def cached(store_path, items, counter=None, **store_options):
    """A CachedDataset over the items, without a plan (the RAM tier keeps
    what fits), and its store."""
    store_options.setdefault("ram", "32MiB")
    store_options.setdefault("disk", 0)
    store = opt4store.Store(store_path, **store_options)
    ds = opt4store.CachedDataset(ListDataset(items, counter), store)
    return ds, store


def read_twice(ds, n):
    """First pass loads from the source; the second is served by the store."""
    first = [ds[i] for i in range(n)]
    second = [ds[i] for i in range(n)]
    return first, second


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_tensor_dtypes_and_shapes_round_trip(store_path, counter, dtype):
    items = [make_tensor(dtype, shape, seed) for seed, shape in enumerate(SHAPES)]
    expected = [t.clone() for t in items]
    ds, store = cached(store_path, items, counter)
    try:
        first, second = read_twice(ds, len(items))
        for i, (shape, want) in enumerate(zip(SHAPES, expected)):
            assert_same(first[i], want, f"first read of {shape}")
            assert_same(second[i], want, f"stored {shape}")
            assert second[i].is_contiguous()
        st = store.stats()
        # The second pass came from the store, not from the source.
        assert counter.count == len(items)
        assert st["hits_ram"] == len(items), st
        assert st["source_loads"] == len(items), st
    finally:
        store.close()


def noncontiguous_tensors():
    base = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    return {
        "permuted": base.permute(3, 1, 0, 2),
        "transposed": torch.arange(30, dtype=torch.int64).reshape(5, 6).t(),
        "strided": base[:, ::2, 1:, ::3],
        "expanded": torch.arange(6, dtype=torch.int16).expand(4, 6),
        "channels_last": (torch.rand(2, 3, 8, 8) * 255).to(torch.uint8)
        .contiguous(memory_format=torch.channels_last),
        "narrowed_bf16": torch.randn(6, 10).to(torch.bfloat16)[:, 2:7],
        "diagonal": torch.randn(5, 5, dtype=torch.float64).diagonal(),
    }


@pytest.mark.parametrize("name", list(noncontiguous_tensors()))
def test_noncontiguous_tensor_comes_back_contiguous_and_equal(store_path, name):
    source = noncontiguous_tensors()[name]
    assert not source.is_contiguous()
    ds, store = cached(store_path, [source])
    try:
        ds[0]  # miss: stored
        got = ds[0]  # from the store
        assert store.stats()["hits_ram"] == 1
        assert got.is_contiguous()
        assert_same(got, source)
    finally:
        store.close()


def test_noncontiguous_tensor_first_read_is_contiguous(store_path):
    """The issue: non-contiguous input comes back contiguous. The first read
    (a miss, loaded from the source) is a read like any other."""
    source = torch.arange(24, dtype=torch.float32).reshape(4, 6).t()
    ds, store = cached(store_path, [source])
    try:
        got = ds[0]
        assert_same(got, source)
        assert got.is_contiguous(), "the value returned on a miss is the source's non-contiguous tensor"
    finally:
        store.close()


def test_conjugated_complex_tensor_round_trips(store_path):
    """x.conj() is a lazily conjugated view: its values are the conjugates,
    though its memory holds the unconjugated numbers."""
    base = torch.randn(4, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
    items = [base.conj(), (base.conj(), 1)]
    expected = [base.conj().resolve_conj(), (base.conj().resolve_conj(), 1)]
    ds, store = cached(store_path, items)
    try:
        ds[0]
        ds[1]
        assert_same(ds[0], expected[0], "tensor")
        assert_same(ds[1], expected[1], "tuple")
    finally:
        store.close()


NUMPY_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
                np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_,
                np.longdouble]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_arrays_round_trip(store_path, dtype):
    rng = np.random.default_rng(5)
    shapes = [(9,), (2, 3, 4), (0, 4), (1,)]
    # np.asarray: arithmetic on a 0-d array gives a numpy scalar, not an array.
    items = [np.asarray(rng.standard_normal(shape) * 50).astype(dtype) for shape in shapes]
    assert all(isinstance(a, np.ndarray) for a in items)
    expected = [a.copy() for a in items]
    ds, store = cached(store_path, items)
    try:
        first, second = read_twice(ds, len(items))
        for shape, a, b, want in zip(shapes, first, second, expected):
            assert_same(a, want, f"first read of {shape}")
            assert_same(b, want, f"stored {shape}")
        assert store.stats()["hits_ram"] == len(items)
    finally:
        store.close()


def test_zero_dim_numpy_arrays_round_trip(store_path):
    items = [np.array(4), np.array(2.5, np.float32), np.array(True)]
    expected = [a.copy() for a in items]
    ds, store = cached(store_path, items)
    try:
        first, second = read_twice(ds, len(items))
        for i, want in enumerate(expected):
            assert_same(first[i], want, f"first read of {i}")
            assert_same(second[i], want, f"stored {i}")
    finally:
        store.close()


def structures():
    g = torch.Generator().manual_seed(11)
    return [
        (torch.randint(0, 255, (3, 8, 8), generator=g, dtype=torch.uint8), 7),
        [torch.randn(5, generator=g), np.arange(6, dtype=np.float32).reshape(2, 3), "name",
         3.5, None, True, -2, b"raw"],
        {"image": torch.randint(0, 255, (3, 16, 16), generator=g, dtype=torch.uint8),
         "label": 3, "name": "cat", "boxes": np.array([[0.5, 1.5, 2.0, 3.0]], np.float32),
         "meta": {"id": 5, "tags": ["a", "b"], "score": np.float32(0.25)},
         "count": np.int64(9)},
        ({"a": [torch.tensor(1.5), torch.zeros(0, 3), (np.array([4]), "x")]},
         [torch.tensor([True, False]), torch.randn(2, dtype=torch.complex64, generator=g)],
         {"bf16": torch.randn(3, generator=g).to(torch.bfloat16),
          "f16": torch.randn(3, generator=g).to(torch.float16)}),
        {0: torch.arange(12).reshape(3, 4).t(), 1: np.arange(12).reshape(3, 4).T,
         "nested_empty": ([], {}, ())},
        (np.zeros((0,), np.int64), torch.empty(0, dtype=torch.float64)),
    ]


def test_zero_dim_numpy_array_in_a_structure(store_path):
    items = [(np.array(4), np.array(2.5, np.float32)), {"scalar": np.array(True)}]
    expected = [clone_structure(v) for v in items]
    ds, store = cached(store_path, items)
    try:
        first, second = read_twice(ds, len(items))
        for i, want in enumerate(expected):
            assert_same(second[i], want, f"stored {i}")
    finally:
        store.close()


def clone_structure(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, tuple):
        return tuple(clone_structure(x) for x in v)
    if isinstance(v, list):
        return [clone_structure(x) for x in v]
    if isinstance(v, dict):
        return {k: clone_structure(x) for k, x in v.items()}
    return v


def test_structures_round_trip(store_path, counter):
    items = structures()
    expected = [clone_structure(v) for v in items]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no pickle fallback for these
        ds, store = cached(store_path, items, counter)
        try:
            first, second = read_twice(ds, len(items))
            for i, want in enumerate(expected):
                assert_same(first[i], want, f"first read of structure {i}")
                assert_same(second[i], want, f"stored structure {i}")
            assert counter.count == len(items)
            assert store.stats()["hits_ram"] == len(items)
        finally:
            store.close()


def test_a_read_back_structure_encodes_as_the_loaded_one(store_path, counter):
    """A value read from the store has the meta of the value loaded (batch
    layouts compare metas as bytes): a key that is also a leaf kind's name
    ("a", "t") is one string object in the loaded value, two in the read."""
    from opt4store import _values
    items = structures() + [{"a": np.arange(6, dtype=np.int32), "t": torch.ones(2)},
                            {"t": (torch.zeros(3), "t", "a"), "i": 4}]
    ds, store = cached(store_path, items, counter)
    try:
        first, second = read_twice(ds, len(items))
        for i, item in enumerate(items):
            assert _values.encode(second[i])[0] == _values.encode(item)[0], i
    finally:
        store.close()


def test_pickled_objects_round_trip(store_path):
    items = [Point(1, "a"), {1, 2, 3}, "just a string", 42, 2.5, [Point(2, 3), torch.ones(2)],
             {"p": Point(0, 0)}, frozenset({"x"}), range(3, 9)]
    ds, store = cached(store_path, items)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            first, second = read_twice(ds, len(items))
        for i, want in enumerate(items):
            assert_same(first[i], want, f"first read of {i}")
            assert_same(second[i], want, f"stored {i}")
        assert store.stats()["hits_ram"] == len(items)
    finally:
        store.close()


PICKLE_WARNING_CHILD = r"""
import json, sys, warnings
import opt4store
from o4s_testlib import ListDataset, Point
items = [Point(i, str(i)) for i in range(5)] + [{1, 2}, "label"]
store = opt4store.Store(sys.argv[1], ram="8MiB", disk=0)
ds = opt4store.CachedDataset(ListDataset(items), store)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    values = [ds[i] for i in range(len(items))] + [ds[i] for i in range(len(items))]
ok = values[:len(items)] == items and values[len(items):] == items
w = [(c.category.__name__, str(c.message)) for c in caught]
store.close()
print(json.dumps({"ok": ok, "warnings": w}))
"""


def test_pickle_fallback_warns_once(tmp_path):
    """In a fresh interpreter (the warning is once per process): many
    pickled values, exactly one RuntimeWarning, and the values are right."""
    out = run_child(PICKLE_WARNING_CHILD, tmp_path / "store")
    assert out["ok"]
    assert len(out["warnings"]) == 1, out["warnings"]
    category, message = out["warnings"][0]
    assert category == "RuntimeWarning"
    assert "pickle" in message and "slower" in message


PICKLE_IN_WORKERS_CHILD = """
import json, sys, torch, torch.utils.data, opt4store

class Sets(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return {int(i), -int(i)}  # a set: pickled

store = opt4store.Store(sys.argv[1], ram_items=24, disk=0)
sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(24)), epochs=2)
ds = opt4store.CachedDataset(Sets(), store, sampler)
ok = True
for _ in range(2):  # new workers each epoch
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=4, num_workers=3,
                                         collate_fn=list, multiprocessing_context="fork")
    for batch in loader:
        ok = ok and all(v == {min(v) * -1, min(v)} for v in batch)
store.close()
print(json.dumps({"ok": ok}))
"""


def test_pickle_fallback_warns_once_across_workers(tmp_path):
    """Workers put the pickled values: one warning for the store, not one per
    worker and epoch (6 workers here)."""
    proc = subprocess.run([sys.executable, "-c", PICKLE_IN_WORKERS_CHILD, str(tmp_path / "s")],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["ok"]
    assert proc.stderr.count("through pickle") == 1, proc.stderr


def test_variable_sizes_round_trip(store_path, counter):
    n = 90
    ds, store = cached(store_path, [variable_item(i) for i in range(n)], counter)
    try:
        first, second = read_twice(ds, n)
        for i in range(n):
            assert_same(first[i], variable_item(i), f"first read of {i}")
            assert_same(second[i], variable_item(i), f"stored {i}")
        assert store.stats()["hits_ram"] == n
        assert counter.count == n
    finally:
        store.close()


def test_large_and_tiny_values_together(store_path):
    g = torch.Generator().manual_seed(2)
    items = [torch.randn(3, 512, 512, generator=g), torch.tensor(True), torch.zeros(0),
             torch.randint(0, 255, (1 << 20,), generator=g, dtype=torch.uint8)]
    expected = [t.clone() for t in items]
    ds, store = cached(store_path, items, ram="64MiB")
    try:
        first, second = read_twice(ds, len(items))
        for i, want in enumerate(expected):
            assert_same(second[i], want, f"stored {i}")
        assert store.stats()["hits_ram"] == len(items)
    finally:
        store.close()


# ---------------------------------------------------------------- fresh values


def test_mutating_a_returned_tensor_changes_nothing(store_path):
    source = torch.arange(10, dtype=torch.float32)
    ds, store = cached(store_path, [source.clone()])
    try:
        first = ds[0]
        first.fill_(-1)  # the value returned on the miss
        a = ds[0]
        assert_same(a, source)
        a.fill_(-2)  # a value served by the store
        a.resize_(0)
        b = ds[0]
        assert_same(b, source)
        c = ds[0]
        assert b.data_ptr() != c.data_ptr(), "two reads share memory"
        b.add_(1)
        assert_same(c, source)
        assert_same(ds[0], source)
    finally:
        store.close()


def test_mutating_the_source_after_storing_changes_nothing(store_path):
    items = [torch.arange(6, dtype=torch.int32), {"x": torch.ones(3), "y": np.ones(2)},
             np.arange(4, dtype=np.int64)]
    expected = [clone_structure(v) for v in items]
    ds, store = cached(store_path, items)
    try:
        for i in range(len(items)):
            ds[i]
        items[0].zero_()
        items[1]["x"].zero_()
        items[1]["y"][:] = 0
        items[2][:] = 0
        for i, want in enumerate(expected):
            assert_same(ds[i], want, f"item {i}")
    finally:
        store.close()


def test_mutating_returned_structures_and_arrays_changes_nothing(store_path):
    items = [{"x": torch.arange(5), "y": np.arange(5.0), "z": [torch.ones(2, 2)]},
             np.arange(8, dtype=np.float32)]
    expected = [clone_structure(v) for v in items]
    ds, store = cached(store_path, [clone_structure(v) for v in items])
    try:
        for _ in range(2):  # the miss, then a hit
            got = ds[0]
            got["x"].fill_(100)
            got["y"][:] = -1
            got["z"][0].zero_()
            got["z"].append("extra")
            arr = ds[1]
            arr[:] = 7
        assert_same(ds[0], expected[0])
        assert_same(ds[1], expected[1])
        # Leaves of one value do not alias each other either.
        v = ds[0]
        v["x"].fill_(-5)
        assert_same(v["z"][0], expected[0]["z"][0])
        assert np.array_equal(v["y"], expected[0]["y"])
    finally:
        store.close()


# ---------------------------------------------------------------- through the disk tier


def test_values_round_trip_through_the_disk_tier(store_path):
    """Stored with a disk tier, closed, reopened: every value is read back
    from disk without calling the source."""
    n = 60
    items = ([variable_item(i) for i in range(n)] + structures() +
             [make_tensor(d, (2, 3), 1) for d in TORCH_DTYPES] + [np.arange(5, dtype=np.uint16)])
    expected = [clone_structure(v) for v in items]
    store = opt4store.Store(store_path, ram_items=8, disk="64MiB")
    ds = opt4store.CachedDataset(ListDataset(items), store)
    for i in range(len(items)):
        ds[i]
    store.close()

    store = opt4store.Store(store_path, ram_items=8, disk="64MiB")
    try:
        ds = opt4store.CachedDataset(FailingDataset(len(items)), store, spot_check=0)
        for i, want in enumerate(expected):
            assert_same(ds[i], want, f"item {i}")
        st = store.stats()
        assert st["source_loads"] == 0, st
        assert st["hits_disk"] + st["hits_ram"] == len(items), st
        assert st["hits_disk"] > 0, st
    finally:
        store.close()


def test_variable_dataset_helper_is_deterministic():
    """The workers' source must give the same value every call."""
    a, b = VariableDataset(10), VariableDataset(10)
    for i in range(10):
        assert_same(a[i], b[i])


def container_samples():
    from o4s_testlib import Pair, Tagged
    import collections
    counts = collections.defaultdict(int, {"a": 1})
    return [
        Pair(torch.arange(4), 3),
        {"pair": Pair(torch.ones(2), -1), "names": ["x", "y"]},
        collections.OrderedDict([("b", torch.zeros(3)), ("a", 2.5)]),
        counts,
        Tagged([torch.ones(1), True]),
    ]


@pytest.mark.parametrize("disk", [0, "16MiB"])
def test_container_types_survive_the_cache(store_path, disk):
    items = container_samples()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ds, store = cached(store_path, items, ram=None, ram_items=1 if disk else len(items),
                           disk=disk)
        try:
            first, second = read_twice(ds, len(items))
            for i, want in enumerate(items):
                assert_same(first[i], want, f"first read {i}")
                assert_same(second[i], want, f"stored {i}")
            assert second[3].default_factory is int  # a defaultdict keeps its factory
            assert second[3]["missing"] == 0
        finally:
            store.close()


def test_containers_that_cannot_hold_leaves_keep_their_type(store_path):
    """torch.Size (a tuple of ints) cannot be rebuilt around leaves: such a
    value is pickled whole, with its type; a structseq is a structure."""
    import collections
    items = [(torch.Size([2, 3]), torch.ones(2)), torch.max(torch.tensor([[1., 5.], [3., 2.]]), 1),
             collections.Counter({"a": 2, "b": 1})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the pickle fallback's warning
        ds, store = cached(store_path, items)
        try:
            first, second = read_twice(ds, len(items))
            for i, want in enumerate(items):
                for got in (first[i], second[i]):
                    assert type(got) is type(want), (i, type(got))
            assert second[0][0] == torch.Size([2, 3]) and torch.equal(second[0][1], torch.ones(2))
            assert torch.equal(second[1].values, items[1].values)
            assert torch.equal(second[1].indices, items[1].indices)
            assert second[2] == items[2]
        finally:
            store.close()


def test_numbers_in_structures_are_exact(store_path):
    items = [(2 ** 62 + 1, -0.0, True, False, 1e308, -(2 ** 63)), (2 ** 70, float("nan")),
             [float("inf"), -1, 0]]
    ds, store = cached(store_path, items)
    try:
        for i, want in enumerate(items):
            got = ds[i]
            got_again = ds[i]
            for value in (got, got_again):
                assert type(value) is type(want)
                for a, b in zip(value, want):
                    assert type(a) is type(b), (a, b)
                    assert a == b or (a != a and b != b), (a, b)
                    if isinstance(b, float) and b == 0:
                        assert math.copysign(1, a) == math.copysign(1, b)
    finally:
        store.close()


def test_same_structure_same_meta_whatever_the_numbers():
    from opt4store import _values
    a = _values.encode((torch.zeros(3, 2), 1, 0.5, True, "cat"))[0]
    b = _values.encode((torch.ones(3, 2), 7, -2.0, False, "cat"))[0]
    c = _values.encode((torch.ones(3, 2), 7, -2.0, False, "dog"))[0]
    d = _values.encode((torch.ones(2, 3), 7, -2.0, False, "cat"))[0]
    assert a == b
    assert a != c and a != d  # other strings, other shapes: other layouts
    leaves = _values.layout(a)
    assert [leaf[0] for leaf in leaves] == ["t", "i", "f", "b"]
    assert [leaf[3] % 64 for leaf in leaves] == [0, 0, 0, 0]


def test_a_class_pickle_cannot_name_keeps_its_plain_type(store_path):
    import collections
    Local = collections.namedtuple("Local", "x y")
    ds, store = cached(store_path, [Local(torch.ones(2), 5)])
    try:
        with pytest.warns(RuntimeWarning, match="pickle cannot name"):
            first = ds[0]
        assert type(first) is Local  # the first read returns the source's value
        second = ds[0]
        assert type(second) is tuple
        assert_same(second, (torch.ones(2), 5))
    finally:
        store.close()


def test_cli_get_meta_describes_python_values(tmp_path, opt4store_cli):
    """`opt4store get --meta` on values the Python package stored: the tag's
    meaning, and the pickled skeleton as a size, not raw pickle bytes."""
    items = [{"x": torch.full((4,), i), "name": f"n{i}"} for i in range(3)] + [{1, 2}]
    store = opt4store.Store(tmp_path / "s", ram_items=4, disk="1MiB")
    ds = opt4store.CachedDataset(ListDataset(items), store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the set is pickled
        for i in range(len(items)):
            ds[i]
    store.close()
    shown = {}
    for i in (0, 3):
        out = subprocess.run([opt4store_cli, "get", str(tmp_path / "s"), str(i), "--meta"],
                             check=True, capture_output=True, text=True).stdout
        shown[i] = out
        assert "\\x80" not in out, out  # no raw pickle
    assert "tag:      3 (a Python structure" in shown[0], shown[0]
    assert "pickled; Store.get in Python returns the value" in shown[0], shown[0]
    assert "tag:      4 (a pickled Python object)" in shown[3], shown[3]
    from opt4store import _values
    assert (_values.TAG_TENSOR, _values.TAG_NUMPY, _values.TAG_STRUCT, _values.TAG_PICKLE) == \
        (1, 2, 3, 4)  # the numbers engine/include/opt4store/value.h describes
