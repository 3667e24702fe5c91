"""Stale stores (issue 14): a store's fingerprint, reset=True, `opt4store
clear`, and CachedDataset's spot check of what a store holds against the
dataset when no fingerprint is given."""

import json
import re
import shutil
import subprocess
import warnings

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import (CallCounter, FailingDataset, UniformDataset, run_planned, uniform_item)

N = 40
STORE = dict(ram_items=8, disk="16MiB")


class ScaledDataset(torch.utils.data.Dataset):
    """uniform_item(i + shift) * scale: scale 2 is a changed transform, a
    shift another dataset of the same length."""

    def __init__(self, n, scale=1, shift=0, counter=None):
        self.n, self.scale, self.shift, self.counter = n, scale, shift, counter

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.counter is not None:
            self.counter.hit()
        return uniform_item(int(i) + self.shift) * self.scale


class RandomDataset(torch.utils.data.Dataset):
    """A random augmentation inside the dataset: another value every load."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": torch.rand(16), "label": int(i)}


def fill(path, dataset, **options):
    """Stores every item of dataset in a new store at path, then closes it."""
    store = opt4store.Store(path, **STORE, **options)
    try:
        ds = opt4store.CachedDataset(dataset, store)
        for i in range(len(dataset)):
            ds[i]
        assert store.stats()["disk_items"] == len(dataset)
    finally:
        store.close()


def read_all(path, dataset, **options):
    """Every value of a CachedDataset over dataset, and the store's stats."""
    store = opt4store.Store(path, **STORE, **options)
    try:
        ds = opt4store.CachedDataset(dataset, store)
        return [ds[i] for i in range(len(dataset))], store.stats()
    finally:
        store.close()


def inspect(cli, path):
    out = subprocess.run([cli, "inspect", str(path), "--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def test_another_fingerprint_raises_naming_both_values_and_the_fixes(store_path, opt4store_cli):
    fill(store_path, ScaledDataset(N), fingerprint="resize256")
    with pytest.raises(opt4store.StaleStoreError) as e:
        opt4store.Store(store_path, **STORE, fingerprint="resize128")
    assert isinstance(e.value, opt4store.Error)
    message = str(e.value)
    for words in ("'resize256'", "'resize128'", "reset=True", f"opt4store clear {store_path}"):
        assert words in message, message

    # The same fingerprint vouches for the values: no spot check (the
    # source is never called) and every value comes from the store.
    values, stats = read_all(store_path, FailingDataset(N), fingerprint="resize256")
    assert all(torch.equal(v, uniform_item(i)) for i, v in enumerate(values))
    assert stats["source_loads"] == 0, stats
    # Left out, the saved fingerprint stays.
    read_all(store_path, ScaledDataset(N))
    assert inspect(opt4store_cli, store_path)["fingerprint"] == "resize256"


def test_reset_empties_the_store_and_serves_the_new_values(store_path, counter, opt4store_cli):
    fill(store_path, ScaledDataset(N), fingerprint="v1", policy="lru")
    store = opt4store.Store(store_path, **STORE, fingerprint="v2", reset=True)
    try:
        assert store.stats()["disk_items"] == 0
        ds = opt4store.CachedDataset(ScaledDataset(N, scale=2, counter=counter), store)
        for i in range(N):
            assert torch.equal(ds[i], uniform_item(i) * 2), i
        assert counter.count == N  # each new value loaded once, no old one served
    finally:
        store.close()
    j = inspect(opt4store_cli, store_path)
    assert (j["fingerprint"], j["policy"], j["tiers"]["disk_items"]) == ("v2", "lru", N)
    # The new fingerprint vouches for the new values.
    values, stats = read_all(store_path, FailingDataset(N), fingerprint="v2")
    assert all(torch.equal(v, uniform_item(i) * 2) for i, v in enumerate(values))
    assert stats["source_loads"] == 0, stats


def test_clear_then_reopen_serves_the_new_values(store_path, counter, opt4store_cli):
    fill(store_path, ScaledDataset(N), policy="lru")
    out = subprocess.run([opt4store_cli, "clear", str(store_path)], check=True,
                         capture_output=True, text=True).stdout
    assert f"cleared {store_path}: {N} items" in out, out
    j = inspect(opt4store_cli, store_path)
    assert (j["tiers"]["disk_items"], j["policy"], j["ram_items"]) == (0, "lru", 8)

    # A transform changed, no fingerprint: the emptied store has nothing to
    # spot-check, and serves the new values.
    store = opt4store.Store(store_path, **STORE)
    try:
        ds = opt4store.CachedDataset(ScaledDataset(N, scale=2, counter=counter), store)
        for i in range(N):
            assert torch.equal(ds[i], uniform_item(i) * 2), i
        assert counter.count == N
    finally:
        store.close()


def test_clear_refuses_while_this_process_owns_the_store(store_path, opt4store_cli):
    fill(store_path, ScaledDataset(N))
    store = opt4store.Store(store_path, **STORE)
    try:
        r = subprocess.run([opt4store_cli, "clear", str(store_path)], capture_output=True,
                           text=True)
        assert r.returncode != 0
        assert r.stderr.startswith("opt4store: error: ") and "another process" in r.stderr, \
            r.stderr
        assert store.stats()["disk_items"] == N
    finally:
        store.close()


@pytest.mark.parametrize("changed", [dict(scale=2), dict(shift=1000)],
                         ids=["transform", "another-dataset"])
def test_a_changed_dataset_is_caught_by_the_spot_check(store_path, counter, changed):
    fill(store_path, ScaledDataset(N))
    store = opt4store.Store(store_path, **STORE)
    try:
        with pytest.raises(opt4store.StaleStoreError) as e:
            opt4store.CachedDataset(ScaledDataset(N, counter=counter, **changed), store)
        message = str(e.value)
        index = int(re.search(r"index (\d+)", message).group(1))
        assert 0 <= index < N
        assert f"dataset[{index}]" in message
        assert "reset=True" in message and f"opt4store clear {store_path}" in message, message
        # The first index checked differed from two equal loads of it.
        assert counter.count == 2
        assert store.stats()["accesses"] == 0  # the check read without counting
    finally:
        store.close()


def test_a_random_dataset_warns_once_that_it_is_not_deterministic(store_path):
    fill(store_path, RandomDataset(N))
    store = opt4store.Store(store_path, **STORE)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt4store.CachedDataset(RandomDataset(N), store, spot_check=4)
        found = [w for w in caught if "not deterministic" in str(w.message)]
        assert len(found) == 1, [str(w.message) for w in caught]
        assert issubclass(found[0].category, RuntimeWarning)
        assert "transform=" in str(found[0].message)
    finally:
        store.close()


def test_a_matching_dataset_passes_with_no_warning_and_the_same_stats(tmp_path):
    """The spot check costs its source loads (2) and nothing else: the
    store's counters are those of a run without it (spot_check=0, as before
    the check existed), on two copies of the same store."""
    first = run_planned(tmp_path / "a", N, "shuffled", 1, 2, tmp_path / "calls0", **STORE)
    assert first["wrong"] == [] and first["calls"] == N
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        checked = run_planned(tmp_path / "a", N, "shuffled", 3, 2, tmp_path / "calls1",
                              spot_check=2, **STORE)
        plain = run_planned(tmp_path / "b", N, "shuffled", 3, 2, tmp_path / "calls2",
                            spot_check=0, **STORE)
    assert checked["wrong"] == [] and plain["wrong"] == []
    assert (checked["calls"], plain["calls"]) == (2, 0)
    a, b = checked["stats"], plain["stats"]
    for key in ("accesses", "source_loads", "puts", "drift", "planned_positions", "policy_hits"):
        assert a[key] == b[key], (key, a, b)
    assert a["hits_ram"] + a["hits_disk"] == b["hits_ram"] + b["hits_disk"] == 2 * N, (a, b)
    assert a["source_loads"] == 0


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_spot_check_runs_once_in_the_creating_process_not_in_workers(store_path, tmp_path,
                                                                         context):
    fill(store_path, ScaledDataset(N))
    counter = CallCounter(tmp_path / "calls")
    store = opt4store.Store(store_path, **STORE)
    try:
        sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(range(N)), epochs=1)
        ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
        assert counter.count == 2
        loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2,
                                             multiprocessing_context=context)
        got = torch.cat([batch for batch in loader])
        assert torch.equal(got, torch.stack([uniform_item(i) for i in range(N)]))
        assert counter.count == 2  # workers did not check again, and loaded nothing
        assert store.stats()["source_loads"] == 0
    finally:
        store.close()


def test_a_store_without_a_fingerprint_opens_and_takes_the_first_one(store_path, opt4store_cli,
                                                                    capfd):
    """A store made without a fingerprint has the manifest of the stores
    made before fingerprints existed: no store/fingerprint key."""
    fill(store_path, ScaledDataset(N))
    assert inspect(opt4store_cli, store_path)["fingerprint"] is None
    values, stats = read_all(store_path, ScaledDataset(N))  # passes the spot check
    assert all(torch.equal(v, uniform_item(i)) for i, v in enumerate(values))
    assert stats["source_loads"] == 0
    capfd.readouterr()
    read_all(store_path, ScaledDataset(N), fingerprint="v1")
    assert "had no fingerprint" in capfd.readouterr().err
    assert inspect(opt4store_cli, store_path)["fingerprint"] == "v1"
    with pytest.raises(opt4store.StaleStoreError):
        opt4store.Store(store_path, **STORE, fingerprint="v2")


@pytest.mark.parametrize("kwargs", [dict(fingerprint=""), dict(fingerprint=3),
                                    dict(reset="yes")])
def test_bad_fingerprint_or_reset_fails_at_construction(store_path, kwargs):
    with pytest.raises(opt4store.InvalidArgumentError):
        opt4store.Store(store_path, **STORE, **kwargs)


def test_bad_spot_check_is_refused(store_path):
    store = opt4store.Store(store_path, **STORE)
    try:
        for bad in (-1, 1.5, True):
            with pytest.raises(opt4store.InvalidArgumentError):
                opt4store.CachedDataset(ScaledDataset(N), store, spot_check=bad)
    finally:
        store.close()
