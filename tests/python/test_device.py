"""to_device: the identity on the CPU; on CUDA, batches arrive on the GPU
with the same bytes and containers as a blocking copy, staged ahead of the
caller through reused pinned slots.

The CUDA tests skip without a GPU. The parts that need none run everywhere:
the container-preserving helper (_apply), the background thread that runs
ahead of the caller (_ahead: order, bound, errors, early exit), staging in
the caller's thread (_paced with depth 0), and the CPU and non-CUDA device
paths. test_device_pace.py tests the choice between the two.
"""

import collections
import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import pytest
import torch
import torch.utils.data

import opt4store
from opt4store.device import _ahead, _apply, _Pace, _paced
from o4s_testlib import (PACKAGE_PARENT, UniformDataset, VariableDataset, assert_same,
                         keep_list)

N = 64
BATCH = 8

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

Pair = collections.namedtuple("Pair", "image label")


def make_loader(tmp_path, dataset, loader_class=torch.utils.data.DataLoader, **loader_options):
    """(store, sampler, loader): a loader_class over a CachedDataset of a
    RAM-only store, 2 planned epochs."""
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(len(dataset)),
                                       generator=torch.Generator().manual_seed(1)), epochs=2)
    ds = opt4store.CachedDataset(dataset, store, sampler)
    return store, sampler, loader_class(ds, sampler=sampler, batch_size=BATCH, **loader_options)


def staged_inline(iterator, stage):
    """_paced with depth 0: every batch staged in the caller's thread."""
    return _paced(iterator, stage, 0, _Pace())


def fillers():
    return [t for t in threading.enumerate() if t.name == "opt4store-to-device"]


class Counted:
    """A loader of n batches (k, tensor) that counts how many were pulled;
    raises `fail_at`'s error instead of batch fail_at when given."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at, self.pulled = n, fail_at, 0

    def __len__(self):
        return self.n

    def __iter__(self):
        for k in range(self.n):
            if k == self.fail_at:
                raise KeyError(f"batch {k} failed")
            self.pulled += 1
            yield k, torch.full((3,), k)


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


# ---------------------------------------------------------------- on any machine


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_cpu_is_the_identity(tmp_path, device):
    store, sampler, loader = make_loader(tmp_path, UniformDataset(N))
    try:
        assert opt4store.to_device(loader, device) is loader
        assert opt4store.to_device(loader, device, non_blocking=False) is loader
        for b, batch in enumerate(opt4store.to_device(loader, device)):
            assert batch.device.type == "cpu"
            for j in range(BATCH):
                assert torch.equal(batch[j], UniformDataset(N)[sampler.plan[b * BATCH + j]])
    finally:
        store.close()


def native_loader(tmp_path, dataset, **loader_options):
    return make_loader(tmp_path, dataset, opt4store.DataLoader, **loader_options)


@pytest.mark.parametrize("workers", [0, 2])
def test_native_loader_on_the_cpu_yields_the_datasets_values(tmp_path, workers):
    store, sampler, loader = native_loader(tmp_path, UniformDataset(N), device="cpu",
                                           num_workers=workers)
    try:
        for epoch in range(2):
            count = 0
            for b, batch in enumerate(loader):
                assert batch.device.type == "cpu"
                for j in range(BATCH):
                    expected = UniformDataset(N)[sampler.plan[epoch * N + b * BATCH + j]]
                    assert torch.equal(batch[j], expected), (epoch, b, j)
                count += 1
            assert count == len(loader) == N // BATCH
    finally:
        store.close()


@pytest.mark.parametrize("device", [None, "meta"])
def test_native_loader_keeps_one_device_loader_and_is_freed_with_its_last_reference(
        tmp_path, device):
    # "meta" takes the DeviceLoader's path on any machine (a plain .to per
    # tensor): one DeviceLoader serves every epoch, so that on CUDA its
    # pinned slots do, and it holds the loader weakly (no cycle), so that
    # `del loader` joins the persistent workers at once.
    store, sampler, loader = native_loader(tmp_path, UniformDataset(N), device=device,
                                           num_workers=2, persistent_workers=True)
    try:
        kept = loader._on_device
        assert (kept is None) == (device is None)
        for epoch in range(2):
            batches = [batch for batch in loader]
            assert [tuple(b.shape) for b in batches] == [(BATCH, 64)] * (N // BATCH)
            assert {b.device.type for b in batches} == {device or "cpu"}
            assert loader._on_device is kept
        gone = weakref.ref(loader)
        del batches
        gc.disable()
        try:
            del loader
            assert gone() is None
        finally:
            gc.enable()
    finally:
        store.close()


def test_a_loader_made_in_the_for_statement_lives_while_it_is_iterated(tmp_path):
    # No name holds such a loader: its iterator must, for its DeviceLoader
    # holds it weakly ("meta" takes that path on any machine).
    store = opt4store.Store(tmp_path / "s", ram_items=N, disk=0)
    try:
        ds = opt4store.CachedDataset(UniformDataset(N), store)
        shapes = [tuple(b.shape) for b in opt4store.DataLoader(ds, batch_size=BATCH,
                                                               device="meta")]
        assert shapes == [(BATCH, 64)] * (N // BATCH)
        first = next(iter(opt4store.DataLoader(ds, batch_size=BATCH, device="meta")))
        assert first.device.type == "meta" and tuple(first.shape) == (BATCH, 64)
    finally:
        store.close()


def test_device_loader_on_cpu_yields_the_batches():
    batches = [torch.arange(4), {"x": torch.ones(2)}]
    wrapped = opt4store.DeviceLoader(batches, "cpu")
    assert len(wrapped) == 2
    got = list(wrapped)
    assert got[0] is batches[0] and got[1] is batches[1]


def test_device_loader_rejects_a_negative_depth_and_takes_0():
    with pytest.raises(ValueError, match="depth"):
        opt4store.DeviceLoader([], "cuda", depth=-1)
    assert opt4store.DeviceLoader([], "cuda", depth=0).depth == 0


def test_other_devices_get_a_plain_copy_with_the_containers():
    batches = [Pair(torch.ones(2, 3), [torch.arange(2), "a"]), {"x": torch.zeros(1), "n": 3}]
    got = list(opt4store.to_device(batches, "meta"))
    assert type(got[0]) is Pair and type(got[0].label) is list and got[0].label[1] == "a"
    assert got[0].image.device.type == "meta" and got[0].image.shape == (2, 3)
    assert got[0].label[0].device.type == "meta"
    assert got[1]["x"].device.type == "meta" and got[1]["n"] == 3


def test_apply_keeps_the_containers_and_their_order():
    seen = []

    def mark(t):
        seen.append(int(t[0]))
        return t + 100

    ordered = collections.OrderedDict([("b", torch.tensor([3])), ("a", torch.tensor([4]))])
    batch = {"pair": Pair(torch.tensor([0]), [torch.tensor([1]), "text", 7]),
             "tuple": (torch.tensor([2]), None), "ordered": ordered, "plain": 1.5}
    out = _apply(batch, mark)
    assert seen == [0, 1, 2, 3, 4]
    assert type(out) is dict and list(out) == ["pair", "tuple", "ordered", "plain"]
    assert type(out["pair"]) is Pair and type(out["pair"].label) is list
    assert out["pair"].image.item() == 100 and out["pair"].label[1:] == ["text", 7]
    assert type(out["tuple"]) is tuple and out["tuple"][1] is None
    assert type(out["ordered"]) is collections.OrderedDict and list(out["ordered"]) == ["b", "a"]
    assert out["plain"] == 1.5
    # A dict type that a dict cannot build falls back to a plain dict.
    counts = collections.defaultdict(int, {"x": torch.tensor([5])})
    assert _apply(counts, lambda t: t * 2) == {"x": torch.tensor([10])}


def test_ahead_yields_every_batch_in_order_staged_in_the_background():
    threads = set()

    def stage(batch):
        threads.add(threading.current_thread().name)
        return batch[0] * 10

    assert list(_ahead(iter(Counted(7)), stage, depth=2)) == [0, 10, 20, 30, 40, 50, 60]
    assert threads == {"opt4store-to-device"}
    assert not fillers()
    assert list(_ahead(iter(Counted(0)), stage, depth=2)) == []


@pytest.mark.parametrize("depth", [1, 3])
def test_ahead_runs_at_most_depth_batches_ahead(depth):
    loader = Counted(20)
    batches = _ahead(iter(loader), lambda b: b, depth)
    assert next(batches)[0] == 0
    # One taken, depth queued, one staged and waiting for room in the queue.
    assert wait_for(lambda: loader.pulled == depth + 2)
    time.sleep(0.2)
    assert loader.pulled == depth + 2
    batches.close()
    assert not fillers()


def test_ahead_raises_the_loaders_error_in_place_of_its_batch():
    got = []
    with pytest.raises(KeyError, match="batch 3 failed"):
        for k, _ in _ahead(iter(Counted(6, fail_at=3)), lambda b: b, depth=2):
            got.append(k)
    assert got == [0, 1, 2]
    assert not fillers()


def test_ahead_raises_the_stages_error():
    def stage(batch):
        if batch[0] == 1:
            raise RuntimeError("stage failed")
        return batch

    batches = _ahead(iter(Counted(4)), stage, depth=2)
    assert next(batches)[0] == 0
    with pytest.raises(RuntimeError, match="stage failed"):
        next(batches)
    assert not fillers()


def test_ahead_stops_its_thread_on_break():
    loader = Counted(1000)
    for k, _ in _ahead(iter(loader), lambda b: b, depth=2):
        if k == 2:
            break
    assert not fillers()
    pulled = loader.pulled
    assert pulled <= 3 + 2 + 1
    time.sleep(0.1)
    assert loader.pulled == pulled


def test_depth_0_yields_every_batch_in_order_one_staged_ahead_in_the_caller():
    loader, threads = Counted(7), set()

    def stage(batch):
        threads.add(threading.current_thread())
        return batch[0] * 10

    batches = staged_inline(iter(loader), stage)
    assert next(batches) == 0 and loader.pulled == 2  # the next one staged already
    assert list(batches) == [10, 20, 30, 40, 50, 60]
    assert threads == {threading.current_thread()}
    assert list(staged_inline(iter(Counted(0)), stage)) == []


def test_depth_0_raises_the_loaders_error_in_place_of_its_batch():
    got = []
    with pytest.raises(KeyError, match="batch 3 failed"):
        for k, _ in staged_inline(iter(Counted(6, fail_at=3)), lambda b: b):
            got.append(k)
    assert got == [0, 1, 2]


def test_depth_0_raises_the_stages_error_after_the_batch_before():
    def stage(batch):
        if batch[0] == 2:
            raise RuntimeError("stage failed")
        return batch

    batches = staged_inline(iter(Counted(5)), stage)
    assert [next(batches)[0], next(batches)[0]] == [0, 1]
    with pytest.raises(RuntimeError, match="stage failed"):
        next(batches)


def test_depth_0_pulls_nothing_more_after_a_break():
    loader = Counted(1000)
    for k, _ in staged_inline(iter(loader), lambda b: b):
        if k == 2:
            break
    assert loader.pulled == 4


@pytest.mark.parametrize("leave", ["break", "abandon"])
def test_interpreter_exits_with_a_loop_left_early(leave):
    # "abandon" keeps the unfinished generator alive until the interpreter
    # exits. The loader keeps the thread inside torch's C++ code (a deep
    # queue, a matmul a batch): a daemon thread still there when the
    # interpreter finalizes aborts the process ("terminate called without an
    # active exception"), which the module's atexit hook prevents.
    script = (
        "import itertools, torch\n"
        "from opt4store.device import _ahead\n"
        "endless = ((k, torch.randn(128, 128) @ torch.randn(128, 128))\n"
        "           for k in itertools.count())\n"
        "batches = _ahead(endless, lambda b: b, 64)\n"
        "for k, _ in batches:\n"
        "    if k == 3:\n"
        "        break\n"
        + ("batches.close()\n" if leave == "break" else "") +
        "print('done')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (PACKAGE_PARENT, os.environ.get("PYTHONPATH")) if p))
    child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "done"


# ---------------------------------------------------------------- on CUDA


def blocking_copy(batch):
    return _apply(batch, lambda t: t.to("cuda"))


@cuda
@pytest.mark.parametrize("pin_memory", [False, True])
def test_cuda_batches_have_the_same_bytes(tmp_path, pin_memory):
    store, sampler, loader = make_loader(tmp_path, UniformDataset(N), pin_memory=pin_memory)
    try:
        device_loader = opt4store.to_device(loader, "cuda")
        assert device_loader is not loader
        assert len(device_loader) == len(loader)
        for epoch in range(2):
            count = 0
            for b, batch in enumerate(device_loader):
                assert batch.is_cuda
                # Compute on the current stream, as a training step would.
                host = (batch * 1).cpu()
                for j in range(BATCH):
                    expected = UniformDataset(N)[sampler.plan[epoch * N + b * BATCH + j]]
                    assert torch.equal(host[j], expected)
                count += 1
            assert count == N // BATCH
    finally:
        store.close()


@cuda
@pytest.mark.parametrize("workers,pin_memory", [(0, False), (2, False), (0, True)])
def test_cuda_native_loader_batches_and_its_pinned_slots_kept_across_epochs(
        tmp_path, workers, pin_memory):
    store, sampler, loader = native_loader(tmp_path, UniformDataset(N), device="cuda",
                                           num_workers=workers, pin_memory=pin_memory)
    try:
        rings = []
        for epoch in range(2):
            count = 0
            for b, batch in enumerate(loader):
                assert batch.is_cuda
                host = (batch * 1).cpu()  # computed on the current stream
                for j in range(BATCH):
                    expected = UniformDataset(N)[sampler.plan[epoch * N + b * BATCH + j]]
                    assert torch.equal(host[j], expected), (epoch, b, j)
                count += 1
            assert count == N // BATCH
            ring = loader._on_device._ring
            pointers = [t.data_ptr() for slot in ring.buffers for t in slot if t is not None]
            rings.append((ring, pointers))
        assert rings[1][0] is rings[0][0] and rings[1][1] == rings[0][1]
    finally:
        store.close()


@cuda
def test_cuda_nested_batches(tmp_path):
    dataset = VariableDataset(N)
    store, sampler, loader = make_loader(tmp_path, dataset, collate_fn=keep_list)
    try:
        for b, batch in enumerate(opt4store.to_device(loader, torch.device("cuda", 0))):
            for j, item in enumerate(batch):
                expected = dataset[sampler.plan[b * BATCH + j]]

                def back(v):
                    if isinstance(v, torch.Tensor):
                        assert v.is_cuda
                        return v.cpu()
                    if isinstance(v, tuple):
                        return tuple(back(x) for x in v)
                    if isinstance(v, list):
                        return [back(x) for x in v]
                    if isinstance(v, dict):
                        return {k: back(x) for k, x in v.items()}
                    return v

                assert_same(back(item), expected)
    finally:
        store.close()


@cuda
@pytest.mark.parametrize("depth", [2, 0])
def test_cuda_values_and_containers_equal_a_blocking_copy(depth):
    g = torch.Generator().manual_seed(3)

    def batch(k):
        image = torch.randint(0, 256, (4, 3, 8, 8), generator=g, dtype=torch.uint8)
        return {"pair": Pair(image, [torch.arange(4) + k, f"b{k}"]),
                "pinned": torch.randn(5, generator=g).pin_memory(),
                "strided": torch.randn(6, 4, generator=g).t(),
                "flags": (torch.rand(3, generator=g) > 0.5, k)}

    batches = [batch(k) for k in range(9)]
    got = list(opt4store.to_device(batches, "cuda", depth=depth))
    assert len(got) == len(batches)
    for k, (actual, source) in enumerate(zip(got, batches)):
        assert_same(actual, blocking_copy(source), f"batch {k}")


@cuda
def test_cuda_last_partial_batch_and_the_next_epoch():
    data = torch.utils.data.TensorDataset(torch.arange(70 * 12, dtype=torch.float32).view(70, 12),
                                          torch.arange(70))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    device_loader = opt4store.to_device(loader, "cuda")
    for epoch in range(2):
        sizes = []
        for (x, i), (ex, ei) in zip(device_loader, loader):
            sizes.append(len(x))
            assert x.is_cuda and i.is_cuda
            assert torch.equal(x.cpu(), ex) and torch.equal(i.cpu(), ei)
        assert sizes == [8] * 8 + [6]


@cuda
@pytest.mark.parametrize("depth", [1, 0])
def test_cuda_slots_are_not_refilled_before_their_copy_is_used(depth):
    # Two slots (depth 1, and 0's), big batches and a slow step: any slot
    # overwritten early shows as a wrong sum on the device.
    batches = [torch.full((1024, 1024), float(k)) for k in range(24)]
    weight = torch.randn(1024, 1024, device="cuda")
    wrong = torch.zeros((), dtype=torch.int64, device="cuda")
    for k, x in enumerate(opt4store.to_device(batches, "cuda", depth=depth)):
        for _ in range(8):
            weight = torch.tanh(weight @ weight)  # keeps the stream busy
        wrong += (x != k).any()
    assert int(wrong) == 0


@cuda
@pytest.mark.parametrize("depth", [2, 0])
def test_cuda_early_break_stops_the_thread_and_the_next_epoch_is_whole(depth):
    loader = Counted(50)
    device_loader = opt4store.to_device(loader, "cuda", depth=depth)
    for k, x in device_loader:
        if k == 2:
            break
    assert not fillers()
    assert loader.pulled <= 3 + 2 + 1
    got = [(k, x.cpu()) for k, x in device_loader]
    assert [k for k, _ in got] == list(range(50))
    assert all(torch.equal(x, torch.full((3,), k)) for k, x in got)


@cuda
@pytest.mark.parametrize("depth", [2, 0])
def test_cuda_loader_error_is_raised_in_the_caller(depth):
    got = []
    with pytest.raises(KeyError, match="batch 4 failed"):
        for k, x in opt4store.to_device(Counted(8, fail_at=4), "cuda", depth=depth):
            got.append(int(x[0]))
    assert got == [0, 1, 2, 3]
    assert not fillers()
