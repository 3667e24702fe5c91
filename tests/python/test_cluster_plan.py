"""A cluster host's plan alone (opt4store/_cluster_plan.py, issue 16): every
read listed once in lockstep order, the plan built an epoch at a time equal
to the whole run sorted at once, a resumed plan's start, new homes for a
lost host's items, and the removal of a killed host's files. The hosts
themselves run in tests/python/test_cluster.py, whose orders these are."""

import json
import os
import sys

import numpy as np
import pytest

from opt4store import _cluster_plan
from opt4store._cluster_plan import HostPlan, RankOrders, home_of
from test_cluster import BATCH, EPOCHS, HOSTS, N, WINDOW, cluster_orders


def dense_serves(plan, world=HOSTS):
    """int64 [world, reads]: where `plan` serves each rank's read, else -1."""
    dense = np.full((world, plan.reads), -1, np.int64)
    at, ranks, reads = plan.serve_positions()
    dense[ranks, reads] = at
    return dense


def test_host_plan_lists_every_read_once_in_lockstep_order():
    orders = cluster_orders()
    reads = orders.shape[1]
    served = np.zeros((HOSTS, reads), int)
    for host in range(HOSTS):
        plan = HostPlan(orders, host, HOSTS, 1, WINDOW, N)
        own = plan.own_positions[0]
        assert np.all(np.diff(own) > 0)
        assert np.array_equal(plan.item_at(own), orders[host])
        at, read_at, ids, homes, ranks, read = plan.arrivals
        assert np.all(homes != host) and np.all(ranks == host)
        assert np.array_equal(ids, orders[host, read])
        assert np.all(at < read_at) and np.array_equal(read_at, own[read])
        assert np.all(np.diff(read_at) > 0)  # readers look their store id up by position
        fresh = N + np.arange(len(at))
        assert np.array_equal(plan.store_ids[at], fresh)
        assert np.array_equal(plan.store_ids[read_at], fresh)
        assert plan.store_size == N + len(at)
        serve_position = dense_serves(plan)
        mask = serve_position >= 0
        assert np.all(orders[mask] % HOSTS == host)
        assert np.array_equal(plan.item_at(serve_position[mask]), orders[mask])
        for rank, read in zip(*np.nonzero(serve_position >= -1)):
            assert plan.serve_position(rank, read) == serve_position[rank, read]
            if mask[rank, read]:
                assert plan.served_rank(serve_position[rank, read]) == rank
        assert sum(plan.served_rank(p) >= 0 for p in range(len(plan))) == mask.sum()
        served += mask
    # every read of an item homed elsewhere is served by its home, once
    homes = orders % HOSTS
    assert np.array_equal(served, (homes != np.arange(HOSTS)[:, None]).astype(int))


def plan_columns(plan):
    """Every array a HostPlan keeps, by name."""
    columns = {f"arrivals[{k}]": a for k, a in enumerate(plan.arrivals)}
    columns.update({name: value for name, value in vars(plan).items()
                    if isinstance(value, np.ndarray)})
    return columns


@pytest.mark.parametrize("wide", [False, True], ids=["32-bit", "64-bit"])
@pytest.mark.parametrize("local_world,window", [(1, WINDOW), (2, 3), (1, 150), (2, 0)])
def test_a_plan_built_an_epoch_at_a_time_equals_the_whole_run_sorted_at_once(
        monkeypatch, local_world, window, wide):
    """HostPlan keeps no rank's whole order: it sorts each epoch's events,
    carrying those a later epoch's may precede (a window of steps; 150 is
    more than an epoch's 64). The reference sorts the whole run at once.
    Its columns are 32-bit where they fit; 64-bit (a run past 2**31
    positions a host), forced here, gives the same plan."""
    if wide:
        monkeypatch.setattr(_cluster_plan, "index_dtype", lambda bound: np.int64)
    orders = cluster_orders()
    world, reads = orders.shape
    hosts = world // local_world
    step = np.broadcast_to(np.arange(reads), orders.shape)
    rank = np.broadcast_to(np.arange(world)[:, None], orders.shape)
    for host in range(hosts):
        own = rank // local_world == host
        home = orders % hosts == host
        kind = np.concatenate([np.zeros(int((~own & home).sum())),
                               np.ones(int((own & ~home).sum())), np.full(int(own.sum()), 2)])
        masks, shifts = (~own & home, own & ~home, own), (window, window, 0)
        at = np.concatenate([step[m] - d for m, d in zip(masks, shifts)])
        who = np.concatenate([rank[m] for m in masks])
        item = np.concatenate([orders[m] for m in masks])
        read = np.concatenate([step[m] for m in masks])
        order = np.lexsort((who, kind, at))
        plan = HostPlan(RankOrders.of_array(orders, reads // EPOCHS), host, hosts, local_world,
                        window, N)
        assert np.array_equal(plan.item_at(np.arange(len(plan))), item[order])
        assert [plan.step_at(p) for p in range(len(plan))] == at[order].tolist()
        arrival = kind[order] == 1
        assert np.array_equal(plan.arrivals[0], np.flatnonzero(arrival))
        assert np.array_equal(plan.arrivals[5], read[order][arrival])
        served = np.flatnonzero(kind[order] == 0)
        assert np.array_equal(plan.serve_positions()[0], served)
        assert np.array_equal(plan.serve_positions()[1], who[order][served])
        for r in range(local_world):
            mine = (kind[order] == 2) & (who[order] == host * local_world + r)
            assert np.array_equal(plan.own_positions[r], np.flatnonzero(mine))
        widths = {name: a.dtype.itemsize for name, a in plan_columns(plan).items()}
        ranks_and_homes = ("_serve_rank", "arrivals[3]", "arrivals[4]")  # always 32-bit
        assert widths == {name: 4 if name in ranks_and_homes or not wide else 8
                          for name in widths}, widths


def test_search_finds_as_numpy_does_with_keys_of_any_integer_type():
    """search() casts the keys to the column's dtype (numpy would copy the
    whole column for each call otherwise); the answers stay numpy's over
    int64, for keys inside, below and above the column's range."""
    values = np.array([-1, 0, 3, 3, 7, 2**31 - 2], np.int64)
    keys = [-2**40, -2, -1, 0, 2, 3, 4, 7, 8, 2**31 - 2, 2**31 - 1, 2**31, 2**40, 2**63 - 1]
    for dtype in (np.int32, np.int64):
        column = values.astype(dtype)
        for side in ("left", "right"):
            want = np.searchsorted(values, np.array(keys, np.int64), side=side)
            assert np.array_equal(_cluster_plan.search(column, keys, side), want)
            for key, k in zip(keys, want.tolist()):
                assert int(_cluster_plan.search(column, key, side)) == k
                if key >= 0:  # a numpy scalar takes the same path as a Python int
                    assert int(_cluster_plan.search(column, np.uint64(key), side)) == k
            assert int(_cluster_plan.search(column, np.uint64(2**64 - 1), side)) == len(values)
            unsigned = [k for k in keys if k >= 0] + [2**64 - 1]  # NO_POSITION
            want = np.searchsorted(values.astype(np.float64), np.array(unsigned, np.float64),
                                   side=side)
            got = _cluster_plan.search(column, np.array(unsigned, np.uint64), side)
            assert np.array_equal(got, want)


def test_a_resumed_plan_starts_at_the_serves_and_arrivals_for_the_resumed_read():
    orders = cluster_orders()
    for read in (1, WINDOW, N // HOSTS + 4 * BATCH):
        for host in range(HOSTS):
            plan = HostPlan(orders, host, HOSTS, 1, WINDOW, N)
            start = plan.resume_position(read)
            serve_position = dense_serves(plan)
            serve_reads = np.nonzero(serve_position >= 0)
            at, _, _, _, _, arrival_reads = plan.arrivals
            # every serve and arrival for a read from `read` on is planned
            # from start on, every one for an earlier read before it
            served_at = serve_position[serve_reads]
            later = serve_reads[1] >= read
            assert np.all(served_at[later] >= start) and np.all(served_at[~later] < start)
            assert np.all(at[arrival_reads >= read] >= start)
            assert np.all(at[arrival_reads < read] < start)
            # the own reads from start on that come before `read` are passed
            own = plan.own_positions[0]
            passed = plan.passed_own_positions(read)
            assert np.array_equal(passed, own[:read][own[:read] >= start])
            assert np.all(own[read:] >= start) and len(passed) <= WINDOW


def test_a_killed_hosts_files_are_removed_by_the_next_owner(tmp_path):
    """The state and plan files of a host whose owner died without close
    are removed when an owner binds; a live owner's stay."""
    import subprocess
    from opt4store import _cluster_reader
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = _cluster_reader.state_path(f"/opt4store-ctl.{dead.pid}.1")
    live = _cluster_reader.state_path(f"/opt4store-ctl.{os.getpid()}.1")
    names = [orphan, orphan + ".own.npy", live, live + ".own.npy"]
    for name in names:
        with open(name, "wb") as f:
            f.write(b"x")
    try:
        _cluster_reader.remove_orphans()
        assert [os.path.exists(name) for name in names] == [False, False, True, True]
    finally:
        for name in names:
            if os.path.exists(name):
                os.remove(name)


def test_new_homes_spread_a_lost_hosts_items_and_compose():
    hosts, ids = 5, np.arange(10 * 5 * 4)
    first = home_of(ids, hosts, [2])
    assert np.array_equal(first[ids % hosts != 2], ids[ids % hosts != 2] % hosts)
    heirs = first[ids % hosts == 2]
    assert set(heirs.tolist()) == {0, 1, 3, 4}
    assert np.all(np.bincount(heirs, minlength=hosts)[[0, 1, 3, 4]] == len(heirs) // 4)
    # a second loss moves only the items whose home it was, onto live hosts
    second = home_of(ids, hosts, [2, 4])
    moved = first != second
    assert np.array_equal(moved, first == 4) and not np.isin(second, [2, 4]).any()
    # the order of the losses does not matter, and every host is lost: -1
    assert np.array_equal(second, home_of(ids, hosts, [4, 2]))
    assert np.all(home_of(ids, hosts, range(hosts)) == -1)


HOST_FILES_CHILD = r"""
import json, os, sys
import numpy as np
import opt4store
from opt4store._cluster_plan import HostPlan
from opt4store._cluster_reader import create_host_files

mnt = sys.argv[1]
n = 256000  # 64000 own reads a host, about 0.9 MiB of files: more than the tmpfs holds
orders = np.random.default_rng(3).permutation(n).reshape(4, -1)
plan = HostPlan(orders, 1, 4, 1, 8, n)
try:
    create_host_files(os.path.join(mnt, "host.state"), plan, orders.shape[1], 4)
    print(json.dumps({"error": None}))
except opt4store.Error as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e), "left": os.listdir(mnt)}))
"""


def test_a_folder_too_small_for_the_host_files_says_so_and_leaves_nothing(tmp_path):
    """/dev/shm too small for a cluster host's files: NoSpaceError naming
    the room they need, and no file of theirs left (a real 256 KiB tmpfs)."""
    from o4s_testlib import run_on_tmpfs
    mnt = tmp_path / "shm"
    mnt.mkdir()
    proc = run_on_tmpfs(mnt, "256k", HOST_FILES_CHILD)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["error"] == "NoSpaceError", r
    assert "MiB) do not fit in" in r["message"] and "--shm-size" in r["message"], r
    assert r["left"] == [], r
