"""stats(): the documented keys exist and add up, totals across workers."""

import json
import os
import subprocess
import re

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, check_epoch, uniform_item

KEYS = ("accesses", "hits_ram", "hits_disk", "source_loads", "drift", "ram_bytes_used",
        "disk_live_bytes")
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
N = 120
BATCH = 12

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def test_stats_before_the_store_opens(store_path):
    store = opt4store.Store(store_path, ram_items=10, disk=0)
    st = store.stats()
    assert list(st) == [name for _, name, _ in opt4store._core.stat_fields()]
    for key, value in st.items():
        assert value == 0, key


def test_stats_are_the_one_table_and_the_readme_lists_it(store_path):
    """stats() has exactly the fields of store_stats.h, in its order, and the
    README's "Stats" section lists the same names, groups and meanings."""
    fields = opt4store._core.stat_fields()
    data = [torch.zeros(4) for _ in range(10)]
    store = opt4store.Store(store_path, ram_items=10, disk="8MiB")
    try:
        ds = opt4store.CachedDataset(data, store)
        assert torch.equal(ds[3], data[3])
        st = store.stats()
        assert list(st) == [name for _, name, _ in fields]
        assert st["accesses"] == 1 and st["source_loads"] == 1, st
    finally:
        store.close()
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Stats\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_0-9]+)` \| ([a-z]+) \| (.+) \|$", section, re.M)
    assert rows == [(name, group, help_text) for group, name, help_text in fields]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stats_add_up(tmp_path, counter, num_workers):
    numel = 256  # 1 KiB of float32 per item
    store = opt4store.Store(tmp_path / "store", ram_items=N // 4, disk="32MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), replacement=True,
                                       generator=torch.Generator().manual_seed(2)), epochs=3)
    ds = opt4store.CachedDataset(UniformDataset(N, numel=numel, counter=counter), store, sampler)
    kwargs = dict(multiprocessing_context="fork") if num_workers else {}
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                         num_workers=num_workers, **kwargs)
    try:
        for epoch in range(3):
            assert check_epoch(loader, sampler.plan, epoch, N, BATCH,
                               lambda i: uniform_item(i, numel), stacked=True) == []
            if epoch == 1:
                # RAM mid-plan (at its end RAM lets go of what the disk holds).
                mid = store.stats()
                assert 0 < mid["ram_items"] <= N, mid
                assert numel * 4 * mid["ram_items"] <= mid["ram_bytes_used"] <= \
                    (numel * 4 + 512) * mid["ram_items"], mid
        st = store.stats()
        for key in KEYS:
            assert key in st, key
            assert isinstance(st[key], int) and st[key] >= 0, (key, st[key])
        # Totals across every process that read the store.
        assert st["accesses"] == 3 * N, st
        assert st["accesses"] == st["hits_ram"] + st["hits_disk"] + st["source_loads"], st
        # A disk hit's bytes: 1 KiB of payload plus a small header. The owner
        # counts each; a worker's fetched read is not counted if its item
        # left RAM before the count.
        assert st["hits_disk_bytes"] <= (numel * 4 + 512) * st["hits_disk"], st
        if num_workers == 0:
            assert st["hits_disk_bytes"] >= numel * 4 * st["hits_disk"] > 0, st
        assert st["source_loads"] == counter.count, st
        distinct = len(set(int(i) for i in sampler.plan))
        assert st["source_loads"] == distinct, st  # the disk tier keeps every item
        assert st["drift"] == 0, st
        # Bytes: each item is 1 KiB of payload plus a small header.
        assert numel * 4 * st["ram_items"] <= st["ram_bytes_used"] <= (numel * 4 + 512) * st["ram_items"], st
        assert st["disk_items"] == distinct, st
        assert st["disk_live_bytes"] >= numel * 4 * distinct * 0.5, st  # compression may shrink it a bit
    finally:
        del loader
        store.close()


def test_a_closed_store_shows_its_last_run(tmp_path, opt4store_cli):
    """The owner saves its counters at close; `opt4store stats` on the closed
    store shows them, with last_run set (it showed zeros)."""
    n = 40
    store = opt4store.Store(tmp_path / "s", ram_items=n // 4, disk="4MiB")
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(
        range(n), generator=torch.Generator().manual_seed(2)), epochs=2)
    ds = opt4store.CachedDataset(UniformDataset(n), store, sampler)
    for _ in range(2):
        for _ in torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=8):
            pass
    live = store.stats()
    store.close()
    assert not live["last_run"] and live["accesses"] == 2 * n
    out = subprocess.run([opt4store_cli, "stats", str(tmp_path / "s"), "--json"], check=True,
                         capture_output=True, text=True).stdout
    saved = json.loads(out)
    assert saved["last_run"] is True
    for name in ("accesses", "hits_ram", "hits_disk", "source_loads", "puts", "prefetched",
                 "policy_hits", "disk_write_amplification"):
        assert saved[name] == pytest.approx(live[name]), name
    # The closed Store object says the same as the CLI (it said zeros).
    assert store.stats() == saved
    # A new run starts its own counters.
    again = opt4store.Store(tmp_path / "s")
    assert again.stats()["accesses"] == 0 and not again.stats()["last_run"]
    again.close()
