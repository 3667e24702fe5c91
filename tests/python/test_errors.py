"""Errors are opt4store.Error subclasses (and the matching built-ins) with
messages that say what is wrong."""

import os
import signal
import subprocess
import sys

import pytest
import torch

import opt4store
from opt4store import _testing
from o4s_testlib import UniformDataset, child_env


def test_error_hierarchy():
    for cls in (opt4store.InvalidArgumentError, opt4store.BusyError, opt4store.NoSpaceError,
                opt4store.CorruptionError, opt4store.NotFoundError, opt4store.OutOfRangeError,
                opt4store.IOError_, opt4store.StaleStoreError):
        assert issubclass(cls, opt4store.Error)
    assert issubclass(opt4store.InvalidArgumentError, ValueError)
    assert issubclass(opt4store.OutOfRangeError, IndexError)
    assert issubclass(opt4store.NotFoundError, KeyError)
    assert issubclass(opt4store.IOError_, OSError)


def test_ram_and_ram_items_conflict(store_path):
    with pytest.raises(opt4store.InvalidArgumentError) as e:
        opt4store.Store(store_path, ram="1GiB", ram_items=100)
    assert "ram=" in str(e.value) and "ram_items=" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_unknown_policy(store_path):
    with pytest.raises(opt4store.InvalidArgumentError, match="belady-ish"):
        opt4store.Store(store_path, policy="belady-ish")


# The grammar's cases are in test_sizes.py; here, that Store names the option.
@pytest.mark.parametrize("size", ["lots", "12 parsecs", "GiB", "-1GiB", -5, "1..5GiB", True, "",
                                  "3k", 1.5])
def test_bad_size_strings(store_path, size):
    with pytest.raises(opt4store.InvalidArgumentError) as e:
        opt4store.Store(store_path, ram=size)
    assert "ram" in str(e.value)
    with pytest.raises(opt4store.InvalidArgumentError):
        opt4store.Store(store_path, ram_items=10, disk=size)


def test_dataset_of_another_size_than_the_store(store_path):
    store = opt4store.Store(store_path, ram_items=10, disk="16MiB")
    opt4store.CachedDataset(UniformDataset(100), store)
    store.close()

    store = opt4store.Store(store_path, ram_items=10, disk="16MiB")
    try:
        with pytest.raises(opt4store.InvalidArgumentError) as e:
            opt4store.CachedDataset(UniformDataset(50), store)
        assert "100" in str(e.value) and "50" in str(e.value)
        # The right size still works.
        ds = opt4store.CachedDataset(UniformDataset(100), store)
        assert torch.equal(ds[3], UniformDataset(100)[3])
    finally:
        store.close()


HOLDER = r"""
import sys
import opt4store
from opt4store import _testing
from o4s_testlib import UniformDataset
store = opt4store.Store(sys.argv[1], ram_items=10, disk="16MiB")
opt4store.CachedDataset(UniformDataset(100), store)
print("ready", flush=True)
sys.stdin.read()  # hold the store open until the parent closes stdin
store.close()
"""


def test_second_process_gets_busy(store_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, os.fspath(store_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=child_env())
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(opt4store.BusyError) as e:
            opt4store.Store(store_path, ram_items=10, disk="16MiB")
        message = str(e.value)
        assert str(holder.pid) in message, message  # names the holder
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    # Once the holder is gone, the store opens again.
    store = opt4store.Store(store_path, ram_items=10, disk="16MiB")
    assert store.is_open
    store.close()


def test_ram_budget_larger_than_dev_shm(store_path):
    store = _testing.store_with_shm_free(store_path, 1 << 20, ram="64MiB", disk=0)
    with pytest.raises(opt4store.NoSpaceError) as e:
        opt4store.CachedDataset(UniformDataset(10), store)
    message = str(e.value)
    assert "/dev/shm" in message, message
    assert not store.is_open


def test_index_out_of_range(store_path):
    store = opt4store.Store(store_path, ram_items=10, disk=0)
    ds = opt4store.CachedDataset(UniformDataset(10), store)
    try:
        for bad in (10, 11, 10**6):
            with pytest.raises(opt4store.OutOfRangeError) as e:
                ds[bad]
            assert isinstance(e.value, IndexError)
            assert str(bad) in str(e.value)
        with pytest.raises(IndexError):
            ds[-1]
        assert torch.equal(ds[9], UniformDataset(10)[9])  # the store still works
    finally:
        store.close()


def test_closed_store(store_path):
    store = opt4store.Store(store_path, ram_items=10, disk=0)
    ds = opt4store.CachedDataset(UniformDataset(10), store)
    ds[0]
    assert repr(ds) == f"opt4store.CachedDataset(UniformDataset of 10 items, {store!r})"
    assert repr(store).endswith(", open)")
    store.close()
    store.close()  # idempotent
    assert not store.is_open and repr(store).endswith(", closed)")
    with pytest.raises(opt4store.IOError_, match="closed"):
        ds[0]
    # The last run's counters, as the CLI shows a closed store's
    assert store.stats()["accesses"] == 1 and store.stats()["last_run"]


def test_planned_sampler_rejects_bad_input():
    with pytest.raises(opt4store.InvalidArgumentError):
        opt4store.PlannedSampler([0, 1, 2], epochs=0)

    class Shrinking(torch.utils.data.Sampler):
        def __init__(self):
            self.epoch = 0

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            return iter(range(10 - self.epoch))

        def __len__(self):
            return 10 - self.epoch

    with pytest.raises(opt4store.InvalidArgumentError, match="length"):
        opt4store.PlannedSampler(Shrinking(), epochs=2)
    with pytest.raises(opt4store.InvalidArgumentError, match="negative"):
        opt4store.PlannedSampler([3, -1], epochs=1)


def test_plan_beyond_the_dataset(store_path):
    store = opt4store.Store(store_path, ram_items=10, disk=0)
    try:
        with pytest.raises(opt4store.Error) as e:
            opt4store.CachedDataset(UniformDataset(10), store,
                                    opt4store.PlannedSampler([1, 2, 30], epochs=1))
        assert "30" in str(e.value)
    finally:
        store.close()


OWNER_THAT_FORKS = r"""
import os, sys, time
import opt4store
from opt4store import _testing
from o4s_testlib import UniformDataset
store = opt4store.Store(sys.argv[1], ram_items=10, disk="16MiB")
opt4store.CachedDataset(UniformDataset(100), store)[1]
child = os.fork()  # what a DataLoader does for each worker
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def test_a_forked_child_of_a_killed_owner_does_not_lock_the_store(store_path):
    owner = subprocess.Popen([sys.executable, "-c", OWNER_THAT_FORKS, os.fspath(store_path)],
                             stdout=subprocess.PIPE, text=True, env=child_env())
    child = int(owner.stdout.readline())
    try:
        owner.kill()  # SIGKILL: no close, no cleanup
        owner.wait(timeout=60)
        os.kill(child, 0)  # the orphan still lives
        store = opt4store.Store(store_path, ram_items=10, disk="16MiB")
        assert store.is_open
        os.kill(child, 0)
        store.close()
    finally:
        os.kill(child, signal.SIGKILL)
