"""Shared helpers for opt4store's pytest suite.

This is a plain module (not a conftest) so that spawned DataLoader workers
and child interpreters can import the datasets and collate functions by
name: tests/python is on sys.path both in pytest and in those children.
"""

import collections
import heapq
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.utils.data

import opt4store

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
# The directory that holds the opt4store package the tests imported
# (<build>/python): children must import the same one.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(opt4store.__file__)))


# ---------------------------------------------------------------- counting source calls


class CallCounter:
    """Counts calls across processes (fork, spawn, other interpreters): each
    call appends one byte to a file opened with O_APPEND, so the count is
    the file's size."""

    def __init__(self, path):
        self.path = os.fspath(path)
        with open(self.path, "ab"):
            pass

    def hit(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)

    @property
    def count(self):
        return os.path.getsize(self.path)

    def reset(self):
        with open(self.path, "wb"):
            pass


# ---------------------------------------------------------------- deterministic sources


def uniform_item(i, numel=64):
    """A float32 tensor of numel elements that depends only on i."""
    g = torch.Generator().manual_seed(1000 + int(i))
    return torch.rand(numel, generator=g)


def variable_item(i):
    """A value whose kind and size depend only on i: a bare tensor, a dict
    with a tensor, a label and a name, or a tuple with a numpy array, a
    tensor and a float."""
    i = int(i)
    g = torch.Generator().manual_seed(7 + i)
    length = 1 + (i * 37) % 301  # 1 .. 301 elements: sizes vary item to item
    kind = i % 3
    if kind == 0:
        return torch.randint(0, 256, (length,), generator=g, dtype=torch.uint8)
    if kind == 1:
        return {"x": torch.randn(3, length, generator=g), "label": i, "name": f"item{i}"}
    rng = np.random.default_rng(i)
    return (rng.integers(-1000, 1000, size=(length, 2)).astype(np.int32),
            torch.randn(length, generator=g, dtype=torch.float64), float(i) / 2)


class UniformDataset(torch.utils.data.Dataset):
    """n items of uniform_item(i); counts its calls when counter is given."""

    def __init__(self, n, numel=64, counter=None):
        self.n, self.numel, self.counter = n, numel, counter

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= int(i) < self.n:
            raise IndexError(i)
        if self.counter is not None:
            self.counter.hit()
        return uniform_item(i, self.numel)


class VariableDataset(torch.utils.data.Dataset):
    """n items of variable_item(i); counts its calls when counter is given."""

    def __init__(self, n, counter=None):
        self.n, self.counter = n, counter

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= int(i) < self.n:
            raise IndexError(i)
        if self.counter is not None:
            self.counter.hit()
        return variable_item(i)


class ListDataset(torch.utils.data.Dataset):
    """Returns the objects of a list as they are (the same object each call)."""

    def __init__(self, items, counter=None):
        self.items, self.counter = list(items), counter

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if self.counter is not None:
            self.counter.hit()
        return self.items[int(i)]


class MadeDataset(torch.utils.data.Dataset):
    """n items, item i being make(i) (a module-level function, so that
    spawn workers can import it)."""

    def __init__(self, make, n):
        self.make, self.n = make, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(int(i))


class FailingDataset(torch.utils.data.Dataset):
    """A source that must not be called: every value must come from the store."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raise AssertionError(f"the source was called for item {int(i)}")


def keep_list(batch):
    """collate_fn for items of different sizes: the batch stays a list."""
    return list(batch)


# ---------------------------------------------------------------- comparing values


def assert_same(actual, expected, where="value"):
    """Deep equality with the same types, dtypes and shapes."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: {type(actual)} is not a tensor"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
        assert actual.device == expected.device, f"{where}: device {actual.device}"
        assert torch.equal(actual, expected.resolve_conj().resolve_neg()), f"{where}: values differ"
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{where}: {type(actual)} is not an array"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
        assert np.array_equal(actual, expected), f"{where}: values differ"
    elif isinstance(expected, dict):
        assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
        assert list(actual.keys()) == list(expected.keys()), f"{where}: keys differ"
        for k in expected:
            assert_same(actual[k], expected[k], f"{where}[{k!r}]")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{k}]")
    else:
        assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def check_epoch(batches, plan, epoch, epoch_length, batch_size, expected_fn, stacked):
    """Compares every sample of an epoch's batches with the source, in plan
    order. Returns the number of wrong samples (with the first few listed)."""
    wrong = []
    seen = 0
    for b, batch in enumerate(batches):
        items = list(batch.unbind(0)) if stacked else batch
        for j, got in enumerate(items):
            position = epoch * epoch_length + b * batch_size + j
            index = int(plan[position])
            try:
                assert_same(got, expected_fn(index), f"position {position} (index {index})")
            except AssertionError as e:
                wrong.append(str(e))
            seen += 1
    assert seen == epoch_length, f"epoch {epoch}: {seen} samples, expected {epoch_length}"
    return wrong


def epoch_then_part_of_the_next(loader, state_dict, batches):
    """Reads an epoch of `loader`, saves state_dict() (a checkpoint at the
    next epoch's start), then reads `batches` batches of the next epoch and
    stops: where a loop that rolls back to its checkpoint stands. Returns
    the checkpoint."""
    for _ in loader:
        pass
    checkpoint = state_dict()
    for k, _ in enumerate(loader):
        if k + 1 == batches:
            break
    return checkpoint


def record_run(loader, state_dict, epochs):
    """`epochs` epochs of `loader`: every batch, and state_dict() taken in
    the loop's body at each (a checkpoint there)."""
    batches, states = [], []
    for _ in range(epochs):
        for batch in loader:
            batches.append(batch)
            states.append(state_dict())
    return batches, states


def assert_resumes_after(loader, batches, stop):
    """`loader`, resumed from a checkpoint taken at batch `stop` of a run
    whose batches (every epoch's) are `batches`, yields exactly the rest."""
    rest = []
    while len(rest) < len(batches) - stop - 1:
        rest += list(loader)
    assert len(rest) == len(batches) - stop - 1, stop
    for k, batch in enumerate(rest):
        assert_same(batch, batches[stop + 1 + k], f"resumed after {stop}: batch {k}")


# ---------------------------------------------------------------- offline Belady


def belady_hits(sequence, capacity):
    """Hits of Belady's MIN with bypass on a sequence of ids, for a cache of
    `capacity` equally sized items: on a miss, the item read next furthest
    in the future among the residents and the newcomer is the one left out
    (never-read-again counts as infinitely far). Textbook version with a
    max-heap of (next use) and lazy deletion."""
    n = len(sequence)
    infinity = n + 1
    next_use = [infinity] * n
    last = {}
    for t in range(n - 1, -1, -1):
        x = sequence[t]
        next_use[t] = last.get(x, infinity)
        last[x] = t
    resident = {}  # id -> its next use
    heap = []  # (-next use, id), stale entries skipped
    hits = 0
    for t, x in enumerate(sequence):
        nxt = next_use[t]
        if x in resident:
            hits += 1
            resident[x] = nxt
            heapq.heappush(heap, (-nxt, x))
            continue
        if capacity <= 0:
            continue
        if len(resident) < capacity:
            resident[x] = nxt
            heapq.heappush(heap, (-nxt, x))
            continue
        while True:  # the resident read furthest away
            far, victim = heap[0]
            if resident.get(victim) == -far:
                break
            heapq.heappop(heap)
        if -far > nxt:  # evict it, admit x
            heapq.heappop(heap)
            del resident[victim]
            resident[x] = nxt
            heapq.heappush(heap, (-nxt, x))
        # else: bypass (x is read again no sooner than every resident)
    return hits


def belady_hits_scan(sequence, capacity):
    """The same policy as a plain O(n * C) scan over the residents, to
    cross-check the heap version."""
    n = len(sequence)
    next_use = []
    for t, x in enumerate(sequence):
        u = t + 1
        while u < n and sequence[u] != x:
            u += 1
        next_use.append(u if u < n else n + 1)
    resident = {}  # id -> its next use
    hits = 0
    for t, x in enumerate(sequence):
        if x in resident:
            hits += 1
            resident[x] = next_use[t]
            continue
        if capacity <= 0:
            continue
        if len(resident) < capacity:
            resident[x] = next_use[t]
            continue
        victim = max(resident, key=resident.get)
        if resident[victim] > next_use[t]:
            del resident[victim]
            resident[x] = next_use[t]
    return hits


def optimal_hits_exhaustive(sequence, capacity):
    """The true optimum over every admission and eviction choice (tiny inputs)."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def best(t, cache):
        if t == len(sequence):
            return 0
        x = sequence[t]
        if x in cache:
            return 1 + best(t + 1, cache)
        options = [best(t + 1, cache)]  # bypass
        if len(cache) < capacity:
            options.append(best(t + 1, cache | {x}))
        else:
            for v in cache:
                options.append(best(t + 1, (cache - {v}) | {x}))
        return max(options)

    return best(0, frozenset())


# ---------------------------------------------------------------- a full disk


def fill_disk(directory):
    """Fills the file system that holds directory to the last byte, as a
    user's other files would: directory/filler grows in ever smaller
    writes until each size is refused. (tests/python/test_full_disk.py and
    bench/fault_campaign_children.py, in a small tmpfs.)"""
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for chunk in (1 << 16, 4096, 1):
        try:
            while True:
                os.write(fd, b"f" * chunk)
        except OSError:
            pass
    os.close(fd)


def count_served(store, ids, value):
    """(found, wrong): how many of ids the store serves (a Get with no
    position), and how many of those differ from value(id)."""
    import torch
    from opt4store import NO_POSITION
    found = wrong = 0
    for i in ids:
        v = store.get(NO_POSITION, i)
        if v is not None:
            found += 1
            wrong += not torch.equal(v, value(i))
    return found, wrong


# ---------------------------------------------------------------- child interpreters


def child_env():
    """Environment for a child interpreter that imports the same opt4store
    and this module."""
    env = dict(os.environ)
    parts = [PACKAGE_PARENT, TESTS_DIR]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run_child(code, *args, timeout=120):
    """Runs code in a fresh interpreter (the one running the tests) and
    returns the JSON object of its last stdout line."""
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=child_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"child failed (rc {proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"child printed nothing; stderr:\n{proc.stderr}"
    return json.loads(lines[-1])


def run_bench(name, *args, timeout=300):
    """Runs bench/<name> with args in a fresh interpreter; its stdout. Fails
    the test if it exits non-zero."""
    script = os.path.join(os.path.dirname(os.path.dirname(TESTS_DIR)), "bench", name)
    proc = subprocess.run([sys.executable, script, *map(str, args)], env=child_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{name} failed (rc {proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.stdout


def report_from(tmp_path, name, results_json):
    """bench/REPORT.md as bench/report.py writes it from one results file
    (results/<name> holding results_json); its text."""
    results = tmp_path / "results"
    results.mkdir()
    (results / name).write_text(results_json)
    run_bench("report.py", "--results", results, "--out", tmp_path / "REPORT.md")
    return (tmp_path / "REPORT.md").read_text()


_NO_MOUNT = 77  # run_on_tmpfs's child: the tmpfs could not be mounted


def run_on_tmpfs(mnt, size, code, *args, env=None, timeout=300):
    """Runs code in a fresh interpreter inside a mount namespace of its own
    (unshare -m), with a tmpfs of `size` ("16m") mounted on the directory
    mnt (its path is the code's first argument), so the code can fill a
    small file system for real. Skips the calling test, saying why, where
    that is impossible (not root, no unshare(1), no mount). Returns the
    CompletedProcess (text output)."""
    import shutil
    import pytest
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mounting a small tmpfs to fill needs root and unshare(1)")
    script = f'mount -t tmpfs -o size={size} opt4store-test "$1" || exit {_NO_MOUNT}; ' \
        'shift && exec "$@"'
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                           str(mnt), sys.executable, "-c", code, str(mnt), *map(str, args)],
                          env=env or child_env(), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode == _NO_MOUNT or proc.returncode != 0 and "unshare:" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs in a mount namespace: {proc.stderr.strip()[-200:]}")
    return proc


class Point:
    """A picklable object that is neither a tensor, an array nor a structure."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)

    def __repr__(self):
        return f"Point({self.x!r}, {self.y!r})"


# ---------------------------------------------------------------- one planned run


def make_base_sampler(kind, n, seed):
    """A torch sampler (or list of indices) over range(n), by name."""
    g = torch.Generator().manual_seed(seed)
    if kind == "shuffled":
        return torch.utils.data.RandomSampler(range(n), generator=g)
    if kind == "replacement":
        return torch.utils.data.RandomSampler(range(n), replacement=True, generator=g)
    if kind == "sequential":
        return torch.utils.data.SequentialSampler(range(n))
    if kind.startswith("first:"):  # the first k indices, shuffled
        k = int(kind.split(":")[1])
        return [int(i) for i in torch.randperm(k, generator=g)]
    raise ValueError(kind)


def run_planned(path, n, kind, seed, epochs, counter_path, num_workers=0, batch_size=8,
                spot_check=0, **store_options):
    """Opens the store at path, runs every epoch of a PlannedSampler over
    UniformDataset(n) through a DataLoader, checks every sample, closes the
    store. Returns stats, source calls and wrong samples as a dict.
    spot_check: CachedDataset's; 0 by default, so that the source calls
    counted are the reads' only (test_stale.py checks the spot check's)."""
    counter = CallCounter(counter_path)
    before = counter.count
    store = opt4store.Store(path, **store_options)
    try:
        sampler = opt4store.PlannedSampler(make_base_sampler(kind, n, seed), epochs=epochs)
        ds = opt4store.CachedDataset(UniformDataset(n, counter=counter), store, sampler,
                                     spot_check=spot_check)
        kwargs = dict(multiprocessing_context="fork") if num_workers else {}
        loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=batch_size,
                                             num_workers=num_workers, **kwargs)
        wrong = []
        for epoch in range(epochs):
            wrong += check_epoch(loader, sampler.plan, epoch, len(sampler), batch_size,
                                 uniform_item, stacked=True)
        del loader
        stats = store.stats()
    finally:
        store.close()
    return {"stats": stats, "calls": counter.count - before, "wrong": wrong,
            "reads": int(len(sampler.plan))}


RUN_PLANNED_CHILD = r"""
import json, sys
from o4s_testlib import run_planned
args = json.loads(sys.argv[1])
print(json.dumps(run_planned(**args)))
"""


def run_planned_in_child(**kwargs):
    """run_planned in a second interpreter."""
    kwargs = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in kwargs.items()}
    return run_child(RUN_PLANNED_CHILD, json.dumps(kwargs))


# ---------------------------------------------------------------- container types

Pair = collections.namedtuple("Pair", "image label")


class Tagged(list):
    """A list subclass, to check that a stored structure keeps its type."""


class IntIndexWrapper(torch.utils.data.Dataset):
    """What users write: a Dataset around a CachedDataset that indexes it
    with a plain int (``inner[int(i)]``), losing the PlannedIndex's position."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        return self.inner[int(i)]
