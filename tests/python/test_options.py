"""The settings table (store_options.h) is the one source of the settings'
names: Store's keywords, what a store saves and reports, and the README."""

import inspect
import json
import os
import re
import subprocess

import pytest
import torch

import opt4store

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
KINDS = {"size", "count", "name"}


def test_store_takes_every_setting_by_its_name():
    params = inspect.signature(opt4store.Store).parameters
    names = [name for name, _, _, _ in opt4store._core.setting_fields()]
    assert len(names) >= 8
    for name in names:
        assert name in params, name
    assert {kind for _, kind, _, _ in opt4store._core.setting_fields()} == KINDS


def test_readme_lists_the_settings():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| ([a-z]+) \| (.+?) \| (.+) \|$", section, re.M)
    assert rows == [tuple(field) for field in opt4store._core.setting_fields()]


def test_unknown_keyword_is_a_type_error(tmp_path):
    # The names of the first release's C++ fields are not keywords.
    with pytest.raises(TypeError):
        opt4store.Store(tmp_path / "s", ram_bytes="1MiB")
    with pytest.raises(TypeError):
        opt4store.Store(tmp_path / "s", ram_items=4, disk_budget="1MiB")


@pytest.mark.parametrize("kwargs, words", [
    (dict(ram="12XB"), ["ram", "12XB"]),
    (dict(ram=-1), ["ram", "negative"]),
    (dict(ram_items=2.5), ["ram_items", "2.5"]),
    (dict(ram_items=True), ["ram_items"]),
    (dict(ram_items=4, policy="best"), ["policy", "best"]),
    (dict(ram_items=4, sync="sometimes"), ["sync", "sometimes"]),
    (dict(ram_items=4, compression="zstd"), ["compression", "zstd"]),
    (dict(ram_items=4, prefetch_depth="64KiB"), ["prefetch_depth"]),
    (dict(ram="1MiB", ram_items=4), ["ram", "ram_items"]),
    (dict(ram=0), ["ram=0", "one item"]),
    (dict(ram_items=0), ["ram_items=0", "one item"]),  # was reported as "RAM tier of ram=0"
    (dict(ram_items=4, disk="1KiB"), ["disk=1024", "smallest disk tier, 32 KiB"]),  # at bind
    (dict(ram_items=4, peer_window=0), ["peer_window"]),  # checked without shared="cluster"
    (dict(ram_items=4, peer_timeout=-1.0), ["peer_timeout"]),
    (dict(ram_items=4, queue_bytes="64KiB"), ["queue_bytes=65536", "1 MiB"]),
])
def test_bad_settings_fail_at_construction(tmp_path, kwargs, words):
    with pytest.raises(opt4store.InvalidArgumentError) as e:
        opt4store.Store(tmp_path / "s", **kwargs)
    for word in words:
        assert word in str(e.value)
    assert not os.path.exists(tmp_path / "s")


def test_settings_are_saved_and_reported_by_name(tmp_path, opt4store_cli):
    """What Python gives is what the manifest keeps and `inspect --json`
    shows, key for key; a later open changes a setting and keeps the rest."""
    path = tmp_path / "store"
    data = [torch.full((8,), float(i)) for i in range(20)]
    store = opt4store.Store(path, ram="4MiB", disk="16MiB", policy="lru", prefetch_depth=64,
                            staging="2MiB", compression="none", sync="none")
    ds = opt4store.CachedDataset(data, store)
    assert torch.equal(ds[3], data[3])
    store.close()

    def inspected():
        out = subprocess.run([opt4store_cli, "inspect", str(path), "--json"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out)

    j = inspected()
    assert [k for k in j if k in {f[0] for f in opt4store._core.setting_fields()}] == \
        [f[0] for f in opt4store._core.setting_fields()]
    assert (j["ram"], j["ram_items"], j["disk"], j["policy"], j["prefetch_depth"], j["staging"],
            j["compression"], j["sync"]) == (4 << 20, 0, 16 << 20, "lru", 64, 2 << 20, "none", "none")
    assert j["tiers"]["disk_items"] == 1

    store = opt4store.Store(path, ram_items=5, sync="every")
    ds = opt4store.CachedDataset(data, store)
    assert torch.equal(ds[3], data[3])
    assert store.stats()["hits_disk"] + store.stats()["hits_ram"] == 1
    store.close()
    j = inspected()
    assert (j["ram"], j["ram_items"], j["disk"], j["policy"], j["sync"]) == \
        (0, 5, 16 << 20, "lru", "every")
