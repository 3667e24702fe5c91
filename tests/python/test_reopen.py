"""A store outlives plans: what the disk tier holds is reused by a second
interpreter with the same plan, and by later runs with other plans (another
seed, another sampler, more or fewer epochs)."""

import os

import pytest

import opt4store
from o4s_testlib import FailingDataset, run_planned, run_planned_in_child, uniform_item

N = 120
STORE = dict(ram_items=24, disk="64MiB")


def first_run(tmp_path, kind="shuffled", seed=1, epochs=2):
    out = run_planned(tmp_path / "store", N, kind, seed, epochs, tmp_path / "calls0", **STORE)
    assert out["wrong"] == [], out["wrong"][:3]
    return out


def test_first_run_loads_each_item_once_then_uses_the_disk(tmp_path):
    out = first_run(tmp_path, epochs=3)
    st = out["stats"]
    # The RAM tier holds a fifth of the dataset; re-reads come from the
    # disk tier (read on demand or prefetched into RAM), not the source.
    assert out["calls"] == N
    assert st["source_loads"] == N, st
    assert st["accesses"] == 3 * N, st
    assert st["disk_items"] == N, st
    assert st["disk_live_bytes"] > 0, st


@pytest.mark.parametrize("num_workers", [0, 2])
def test_second_interpreter_same_plan_calls_source_for_nothing(tmp_path, num_workers):
    first_run(tmp_path)
    out = run_planned_in_child(path=tmp_path / "store", n=N, kind="shuffled", seed=1, epochs=2,
                               counter_path=tmp_path / "calls1", num_workers=num_workers, **STORE)
    assert out["wrong"] == [], out["wrong"][:3]
    assert out["calls"] == 0, out
    st = out["stats"]
    assert st["source_loads"] == 0, st
    assert st["accesses"] == out["reads"] == 2 * N, st
    assert st["hits_ram"] + st["hits_disk"] == st["accesses"], st


@pytest.mark.parametrize("kind,seed,epochs", [("shuffled", 99, 1), ("replacement", 5, 3),
                                              ("sequential", 0, 2)])
def test_other_plans_reuse_the_disk(tmp_path, kind, seed, epochs):
    """Another seed, another sampler, more or fewer epochs: the disk holds
    the whole dataset, so nothing is loaded from the source. (In this
    process, after the first run closed the store.)"""
    first_run(tmp_path)
    out = run_planned(tmp_path / "store", N, kind, seed, epochs, tmp_path / "calls1", **STORE)
    assert out["wrong"] == [], out["wrong"][:3]
    assert out["calls"] == 0, out
    assert out["stats"]["source_loads"] == 0, out["stats"]


def test_a_later_plan_loads_only_what_the_disk_lacks(tmp_path):
    """The first run reads only items [0, N/2); a later shuffled plan over
    all items loads exactly the other half, each once."""
    half = N // 2
    out = first_run(tmp_path, kind=f"first:{half}", epochs=2)
    assert out["calls"] == half
    assert out["stats"]["disk_items"] == half
    out = run_planned_in_child(path=tmp_path / "store", n=N, kind="shuffled", seed=3, epochs=2,
                               counter_path=tmp_path / "calls1", **STORE)
    assert out["wrong"] == [], out["wrong"][:3]
    assert out["calls"] == N - half, out
    assert out["stats"]["source_loads"] == N - half, out["stats"]
    # A third run, in this process, finds everything.
    out = run_planned(tmp_path / "store", N, "replacement", 8, 1, tmp_path / "calls2", **STORE)
    assert out["wrong"] == [] and out["calls"] == 0, out


def test_reopened_store_serves_without_a_plan_or_source(tmp_path):
    first_run(tmp_path)
    store = opt4store.Store(tmp_path / "store", **STORE)
    try:
        assert store.is_open  # an existing store opens at once
        ds = opt4store.CachedDataset(FailingDataset(N), store, spot_check=0)
        for i in range(N):
            got = ds[i]
            assert got.dtype == uniform_item(i).dtype and got.equal(uniform_item(i)), i
        assert store.stats()["source_loads"] == 0
    finally:
        store.close()


def test_a_damaged_index_table_names_repair_which_brings_every_value_back(tmp_path,
                                                                          opt4store_cli):
    """Bytes of one of the index's tables overwritten (a bad block on
    disk): the open said only 'Corruption: block checksum mismatch'; it
    names `opt4store repair`, which rebuilds the index from the segments."""
    import subprocess
    import torch
    n, path = 64, str(tmp_path / "store")
    source = [torch.full((256,), float(i)) for i in range(n)]
    store = opt4store.Store(path, ram_items=4, disk="4MiB")
    ds = opt4store.CachedDataset(source, store)
    for i in range(n):
        ds[i]
    store.close()
    subprocess.run([opt4store_cli, "compact", path], check=True, capture_output=True)
    table = sorted(p for p in os.listdir(os.path.join(path, "index")) if p.endswith(".sst"))[0]
    with open(os.path.join(path, "index", table), "r+b") as f:
        f.seek(100)
        f.write(b"damaged bytes")
    with pytest.raises(opt4store.CorruptionError, match=f"opt4store repair {path}"):
        opt4store.CachedDataset(source, opt4store.Store(path, ram_items=4, disk="4MiB"))
    subprocess.run([opt4store_cli, "repair", path], check=True, capture_output=True)
    store = opt4store.Store(path, ram_items=4, disk="4MiB")
    try:
        ds = opt4store.CachedDataset(source, store)
        for i in range(n):
            assert torch.equal(ds[i], source[i])
        assert store.stats()["source_loads"] == 0
    finally:
        store.close()
