"""`opt4store stats` and `inspect` on a store that a training process owns:
they show the owner's live counters, read-only (no file of the store
changes), and a killed owner's OWNER file does not fool them."""

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, child_env

N = 40

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def digest(path):
    """Every file of the store but OWNER, by its path, with a hash of its bytes."""
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            if rel == "OWNER":
                continue
            with open(full, "rb") as f:
                files[rel] = hashlib.sha256(f.read()).hexdigest()
    return files


def cli(opt4store_cli, *args, check=True):
    return subprocess.run([opt4store_cli, *map(str, args)], check=check, capture_output=True,
                          text=True, timeout=60)


def train(store, epochs=2):
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(
        range(N), generator=torch.Generator().manual_seed(3)), epochs=epochs)
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
    for _ in range(epochs):
        for _ in torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=8):
            pass


def test_stats_and_inspect_show_a_store_in_use_live_and_read_only(tmp_path, opt4store_cli):
    path = tmp_path / "s"
    store = opt4store.Store(path, ram_items=N // 4, disk="4MiB")
    try:
        train(store)
        st = store.stats()
        assert st["live"] and st["owner_pid"] == os.getpid(), st
        assert st["hits_ram"] + st["hits_disk"] > 0 and st["accesses"] == 2 * N, st
        before = digest(path)

        live = json.loads(cli(opt4store_cli, "stats", path, "--json").stdout)
        assert list(live) == list(st)
        for name, value in st.items():
            assert live[name] == (pytest.approx(value) if isinstance(value, float) else value), name
        table = cli(opt4store_cli, "stats", path).stdout
        assert table.startswith("live: the store is open, owned by pid %d\n" % os.getpid())

        ij = json.loads(cli(opt4store_cli, "inspect", path, "--json").stdout)
        assert ij["live"] is True and ij["owner_pid"] == os.getpid()
        assert ij["dataset_size"] == N and ij["ram_items"] == N // 4
        assert ij["tiers"]["disk_items"] == st["disk_items"]
        assert ij["tiers"]["ram_items"] == st["ram_items"]
        assert ij["cursor"]["position"] == st["position"]
        assert sum(s["live_bytes"] for s in ij["segments"]) == st["disk_live_bytes"]

        for args in (["verify", path], ["compact", path], ["clear", path], ["repair", path]):
            r = cli(opt4store_cli, *args, check=False)
            assert r.returncode != 0, args
            assert "another process, pid %d," % os.getpid() in r.stderr, (args, r.stderr)
        assert digest(path) == before
    finally:
        store.close()
    assert not (path / "OWNER").exists()
    saved = json.loads(cli(opt4store_cli, "stats", path, "--json").stdout)
    assert saved["live"] is False and saved["owner_pid"] == 0 and saved["last_run"] is True
    assert saved["accesses"] == st["accesses"]
    assert cli(opt4store_cli, "stats", path).stdout.startswith("last run: ")


OWNER = r"""
import sys, time, torch, opt4store
from o4s_testlib import UniformDataset
n = int(sys.argv[2])
store = opt4store.Store(sys.argv[1], ram_items=n // 4, disk="4MiB")
ds = opt4store.CachedDataset(UniformDataset(n), store)
for i in range(n):
    ds[i]
for i in range(n // 4):
    ds[i]
st = store.stats()
print(st["accesses"], st["hits_ram"] + st["hits_disk"], flush=True)
time.sleep(600)
"""


def test_a_killed_owner_leaves_a_file_the_cli_ignores(tmp_path, opt4store_cli):
    path = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(path), str(N)], env=child_env(),
                            stdout=subprocess.PIPE, text=True)
    try:
        accesses, hits = map(int, proc.stdout.readline().split())
        live = json.loads(cli(opt4store_cli, "stats", path, "--json").stdout)
        assert live["live"] is True and live["owner_pid"] == proc.pid
        assert live["accesses"] == accesses and live["hits_ram"] + live["hits_disk"] == hits
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (path / "OWNER").exists()
    after = json.loads(cli(opt4store_cli, "stats", path, "--json").stdout)
    assert after["live"] is False and after["owner_pid"] == 0
    assert json.loads(cli(opt4store_cli, "inspect", path, "--json").stdout)["live"] is False
    cli(opt4store_cli, "verify", path)
