"""DDP: the local ranks of a host share one store (issue 4).

Two local ranks run as two interpreters, as torchrun starts them (LOCAL_RANK,
LOCAL_WORLD_SIZE, RANK and WORLD_SIZE in their environment), under gloo on
the CPU with a file:// rendezvous in tmp_path. Each wraps a shuffling
DistributedSampler in a PlannedSampler, reads through a CachedDataset over
ONE store shared by both (rank 0 the owner, rank 1 a reader), and trains a
tiny DDP model so that the ranks advance in lockstep. Checked: every sample
against the deterministic source, that rank 1 never owned the store, that
stats() gives the host's totals on both ranks, and the host's source loads
(once per item with a RAM tier that holds the dataset; else within 2% of
the reads of an offline Belady on the interleaved host sequence).
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import CallCounter, UniformDataset, belady_hits, child_env, uniform_item
from opt4store.distributed import start_ticks, user_prefix

try:
    import torch.distributed as dist
    _GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:  # pragma: no cover
    _GLOO = False

needs_gloo = pytest.mark.skipif(not _GLOO, reason="torch.distributed with gloo is not available")

N = 512        # items; a multiple of the world size, so DistributedSampler pads nothing
NUMEL = 64     # float32 elements per item
EPOCHS = 3
BATCH = 16
SEED = 11
WORLD = 2


def host_sequence(n=N, world=WORLD, epochs=EPOCHS, seed=SEED):
    """The host's reads in lockstep: rank r's i-th read at i * world + r."""
    ds = list(range(n))
    columns = []
    for r in range(world):
        s = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=r, shuffle=True,
                                                seed=seed)
        order = []
        for e in range(epochs):
            s.set_epoch(e)
            order.extend(int(i) for i in s)
        columns.append(order)
    return np.array(columns, dtype=np.int64).T.reshape(-1)


# ---------------------------------------------------------------- one rank (a child interpreter)


@contextlib.contextmanager
def default_group_without_gloo():
    """While open, the default group's backend reads as NCCL's, and an
    object collective on it fails, as NCCL's would put the objects on
    cuda:current_device() (cuda:0 on every rank before set_device). Yields
    the backends of the groups made meanwhile."""
    made = []
    backend, gather, new_group = dist.get_backend, dist.all_gather_object, dist.new_group

    def get_backend(group=None):
        return "nccl" if group is None or group is dist.group.WORLD else backend(group)

    def all_gather_object(values, value, group=None):
        if group is None or group is dist.group.WORLD:
            raise RuntimeError("all_gather_object on the default (NCCL) group")
        return gather(values, value, group=group)

    def new_group_seen(*args, **kwargs):
        made.append(kwargs.get("backend"))
        return new_group(*args, **kwargs)

    dist.get_backend, dist.all_gather_object, dist.new_group = \
        get_backend, all_gather_object, new_group_seen
    try:
        yield made
    finally:
        dist.get_backend, dist.all_gather_object, dist.new_group = backend, gather, new_group


def _rank_main(config_path, rank):
    with open(config_path) as f:
        cfg = json.load(f)
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    def init_group():
        dist.init_process_group("gloo", init_method="file://" + cfg["rendezvous"], rank=rank,
                                world_size=WORLD)

    if cfg["exchange"] in ("group", "not-gloo"):
        init_group()  # the owner's handle travels by all_gather
    torch.manual_seed(0)
    counter = CallCounter(cfg["counter"])
    dataset = UniformDataset(N, NUMEL, counter=counter)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=WORLD, rank=rank,
                                               shuffle=True, seed=SEED)
    sampler = opt4store.PlannedSampler(base, epochs=EPOCHS)
    path = cfg["rank_paths"][rank] if cfg.get("rank_paths") else cfg["path"]
    store = opt4store.Store(path, ram_items=cfg["ram_items"], disk=cfg["disk"],
                            shared="local")
    if cfg.get("rank_paths"):  # refused at binding, on both ranks
        with pytest.raises(opt4store.InvalidArgumentError) as refused:
            opt4store.CachedDataset(dataset, store, sampler)
        with open(cfg["results"] + f".{rank}", "w") as f:
            json.dump({"rank": rank, "error": str(refused.value), "bound": store._core is not None},
                      f)
        store.close()
        dist.destroy_process_group()
        return
    if cfg["exchange"] == "not-gloo":
        with default_group_without_gloo() as gloo_groups:
            ds = opt4store.CachedDataset(dataset, store, sampler)
        assert gloo_groups == ["gloo"], gloo_groups  # made once, and used
    else:
        ds = opt4store.CachedDataset(dataset, store, sampler)
    if cfg["exchange"] == "file":
        init_group()  # the handle went through a file; DDP needs the group from here on
    owner = store.is_owner

    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH,
                                         num_workers=cfg["workers"],
                                         multiprocessing_context=cfg["context"],
                                         # spawned workers start once, not once an epoch
                                         persistent_workers=cfg["context"] == "spawn")
    model = DistributedDataParallel(nn.Linear(NUMEL, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    length = sampler.epoch_length
    wrong, seen = 0, 0
    for epoch in range(EPOCHS):
        for b, batch in enumerate(loader):
            first = epoch * length + b * BATCH
            ids = sampler.plan[first:first + len(batch)]
            expected = torch.stack([uniform_item(i, NUMEL) for i in ids])
            wrong += sum(not torch.equal(g, e) for g, e in zip(batch, expected))
            seen += len(batch)
            loss = model(batch).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()  # all-reduce: the ranks stay in lockstep
            optimizer.step()

    dist.barrier()
    stats = store.stats()
    result = {"rank": rank, "owner": owner, "wrong": int(wrong), "seen": seen,
              "stride": sampler._stride, "offset": sampler._offset,
              "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float, bool))}}
    store.close()  # the owner's waits for the reader's
    with open(cfg["results"] + f".{rank}", "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------- the parent


def _run_ranks(tmp_path, *, ram_items, disk, workers, exchange, local_env=True, context=None,
               timeout=90, rank_paths=None):
    cfg = {"rendezvous": str(tmp_path / "rendezvous"), "counter": str(tmp_path / "calls"),
           "path": str(tmp_path / "store"), "ram_items": ram_items, "disk": disk,
           "workers": workers, "context": context, "exchange": exchange,
           "results": str(tmp_path / "result"), "rank_paths": rank_paths}
    CallCounter(cfg["counter"])
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(cfg))
    code = "import sys, test_ddp; test_ddp._rank_main(sys.argv[1], int(sys.argv[2]))"
    procs = []
    for rank in range(WORLD):
        env = child_env()
        for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(name, None)
        if local_env:  # as torchrun sets them; else the ranks of this host's name
            env.update({"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(WORLD)})
        env.update({"RANK": str(rank), "WORLD_SIZE": str(WORLD), "OMP_NUM_THREADS": "1"})
        procs.append(subprocess.Popen([sys.executable, "-c", code, str(config_path), str(rank)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        outputs = [p.communicate()[0] for p in procs]
        pytest.fail("the ranks did not finish in time:\n" +
                    "\n".join(f"--- rank {r}\n{o}" for r, o in enumerate(outputs)))
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} failed (rc {p.returncode}):\n{out}"
    results = []
    for rank in range(WORLD):
        with open(cfg["results"] + f".{rank}") as f:
            results.append(json.load(f))
    return results, CallCounter(cfg["counter"]).count


def _check_common(results):
    reads = EPOCHS * N
    for r in results:
        assert r["wrong"] == 0, f"rank {r['rank']}: {r['wrong']} wrong samples"
        assert r["seen"] == reads // WORLD
        assert (r["stride"], r["offset"]) == (WORLD, r["rank"])  # host positions
        # stats() on any rank: the host's totals. No drift: every rank's
        # positions met the owner's interleaved plan.
        assert r["stats"]["accesses"] == reads, (r["rank"], r["stats"])
        assert r["stats"]["drift"] == 0, (r["rank"], r["stats"])
        assert r["stats"]["total_positions"] == reads
    assert results[0]["owner"] is True
    assert results[1]["owner"] is False, "rank 1 opened the store as its owner"


@needs_gloo
@pytest.mark.parametrize("workers,exchange,disk", [(0, "group", "64MiB"), (2, "file", 0),
                                                   (0, "not-gloo", 0)],
                         ids=["workers0-group-disk", "workers2-file-nodisk", "workers0-not-gloo"])
def test_ddp_shared_store_loads_each_item_once(tmp_path, workers, exchange, disk):
    """A RAM tier that holds the dataset: each item comes from the source
    once across both ranks; epochs 2 and 3 are all hits."""
    results, calls = _run_ranks(tmp_path, ram_items=N, disk=disk, workers=workers,
                                exchange=exchange)
    _check_common(results)
    stats = results[0]["stats"]
    assert calls == N, f"{calls} source loads for {N} items (stats {stats})"
    assert stats["source_loads"] == N
    assert stats["hits_ram"] + stats["hits_disk"] == (EPOCHS - 1) * N
    assert results[1]["stats"]["source_loads"] == N
    # The handle file, if one was used, is gone with the owner's close.
    sharing = opt4store.Store(tmp_path / "store", shared="local", local_rank=0,
                              local_world_size=WORLD)._sharing
    assert not os.path.exists(sharing.handle_file())


@needs_gloo
@pytest.mark.parametrize("workers,context,local_env", [(0, None, True), (2, "spawn", False)],
                         ids=["workers0", "workers2-spawn-local-ranks-by-host"])
def test_ddp_shared_store_belady_on_host_sequence(tmp_path, workers, context, local_env):
    """A small RAM tier: the host's hits are those of an offline Belady on
    the interleaved host sequence, give or take 2% of the reads."""
    capacity = 96
    results, calls = _run_ranks(tmp_path, ram_items=capacity, disk=0, workers=workers,
                                exchange="group", local_env=local_env, context=context)
    _check_common(results)
    stats = results[0]["stats"]
    sequence = host_sequence()
    reads = len(sequence)
    best = belady_hits(sequence.tolist(), capacity)
    hits = stats["hits_ram"] + stats["hits_disk"]
    slack = int(0.02 * reads)
    assert hits >= best - slack, f"hits {hits}, Belady {best}, slack {slack}: {stats}"
    assert calls == stats["source_loads"] == reads - hits, stats


# ---------------------------------------------------------------- in one process


def test_host_plan_interleaves_the_local_ranks(tmp_path):
    """Local rank 0 of 2 (no process group: the handle goes to a file),
    alone: it plans the shared store with both ranks' orders interleaved,
    and its indices carry host positions."""
    dataset = UniformDataset(N, NUMEL)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=WORLD, rank=0,
                                               shuffle=True, seed=SEED)
    sampler = opt4store.PlannedSampler(base, epochs=EPOCHS)
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0, shared="local",
                            local_rank=0, local_world_size=WORLD, shared_timeout=0.2)
    try:
        ds = opt4store.CachedDataset(dataset, store, sampler)
        assert store.is_owner
        host = np.concatenate([sampler._host_epoch(e) for e in range(EPOCHS)])
        np.testing.assert_array_equal(host, host_sequence())
        assert store.stats()["total_positions"] == EPOCHS * N
        indices = list(iter(sampler))
        assert [index.position for index in indices[:3]] == [0, 2, 4]
        assert [int(i) for i in indices] == sampler.plan[:N // WORLD].tolist()
        for index in indices[:8]:
            assert torch.equal(ds[index], uniform_item(index, NUMEL))
        handle_file = store._sharing.handle_file()
        assert os.path.exists(handle_file)
    finally:
        with pytest.warns(RuntimeWarning, match="1 of the 1 rank readers expected never attached"):
            store.close()  # rank 1 never came: the close waits shared_timeout, then warns
    assert not os.path.exists(handle_file)


def test_shared_store_needs_a_distributed_sampler(tmp_path):
    dataset = UniformDataset(64, 4)
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(dataset), epochs=1)
    store = opt4store.Store(tmp_path / "store", ram_items=8, disk=0, shared="local",
                            local_rank=1, local_world_size=2)
    with pytest.raises(opt4store.InvalidArgumentError, match="DistributedSampler"):
        opt4store.CachedDataset(dataset, store, sampler)
    assert store._core is None  # a reader that failed attached nothing


def test_shared_store_ranks_must_be_contiguous(tmp_path):
    dataset = UniformDataset(64, 4)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=4, rank=2)
    sampler = opt4store.PlannedSampler(base, epochs=1)
    store = opt4store.Store(tmp_path / "store", ram_items=8, disk=0, shared="local",
                            local_rank=1, local_world_size=2)
    with pytest.raises(opt4store.InvalidArgumentError, match="contiguous"):
        opt4store.CachedDataset(dataset, store, sampler)


def test_more_local_ranks_than_replicas_are_named_as_such(tmp_path):
    """local_world_size=4 with 2 replicas was reported as ranks that are
    not contiguous, which they were."""
    dataset = UniformDataset(64, 4)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1)
    sampler = opt4store.PlannedSampler(base, epochs=1)
    store = opt4store.Store(tmp_path / "store", ram_items=8, disk=0, shared="local",
                            local_rank=1, local_world_size=4)
    with pytest.raises(opt4store.InvalidArgumentError, match="4 local ranks a host, but the "
                       "DistributedSampler has 2 replicas"):
        opt4store.CachedDataset(dataset, store, sampler)


def test_an_owner_removes_the_handle_files_of_owners_that_are_gone(tmp_path):
    """An owner killed before its close leaves its handle file in /dev/shm;
    the next owner to publish removes those whose process is gone (and a
    half-written one, and one whose pid a later process got: its start
    time differs), and leaves a live owner's."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store = opt4store.Store(tmp_path / "store", ram_items=64, disk=0, shared="local",
                            local_rank=0, local_world_size=2, shared_timeout=0.1)
    folder = os.path.dirname(store._sharing.handle_file())
    prefix = os.path.join(folder, f"{user_prefix()}test-{os.getpid()}")
    files = {"gone": f"{prefix}-gone.handle", "half": f"{prefix}-half.handle.{gone.pid}.tmp",
             "live": f"{prefix}-live.handle", "reused": f"{prefix}-reused.handle"}
    started = start_ticks(os.getpid())
    records = {"gone": {"pid": gone.pid}, "half": {"pid": gone.pid},
               "live": {"pid": os.getpid(), "started": started},
               "reused": {"pid": os.getpid(), "started": started + 1}}
    for what, path in files.items():
        with open(path, "w") as f:
            json.dump(records[what], f)
    try:
        dataset = UniformDataset(64, 4)
        base = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0)
        opt4store.CachedDataset(dataset, store, opt4store.PlannedSampler(base, epochs=1))
        assert store.is_owner
        assert not os.path.exists(files["gone"])
        assert not os.path.exists(files["half"])
        assert not os.path.exists(files["reused"])
        assert os.path.exists(files["live"])
        with pytest.warns(RuntimeWarning, match="never attached"):
            store.close()
    finally:
        for path in files.values():
            if os.path.exists(path):
                os.remove(path)


def test_handle_files_of_another_pid_namespace_are_neither_read_nor_removed(tmp_path):
    """Containers that share /dev/shm (docker --ipc=host) do not share
    pids: a writer in another pid namespace looks dead here, or like
    another process. Its handle file, under the same store path, is not this
    namespace's: the owner here neither removes nor replaces it, and a rank
    here never attaches the store it names."""
    ns = os.stat("/proc/self/ns/pid").st_ino
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dataset = UniformDataset(64, 4)
    reader = opt4store.Store(tmp_path / "store", ram_items=64, disk=0, shared="local",
                             local_rank=1, local_world_size=2, shared_timeout=0.3)
    ours = reader._sharing.handle_file()
    assert os.path.basename(ours).startswith(f"opt4store-{os.getuid()}-pidns{ns}-")
    theirs = ours.replace(f"-pidns{ns}-", f"-pidns{ns + 1}-")
    with open(theirs, "w") as f:
        json.dump({"pid": gone.pid, "handle": "/opt4store-ctl.1.2", "path": str(tmp_path)}, f)
    try:
        base = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1)
        with pytest.raises(opt4store.Error, match="waited"):
            opt4store.CachedDataset(dataset, reader, opt4store.PlannedSampler(base, epochs=1))
        owner = opt4store.Store(tmp_path / "store", ram_items=64, disk=0, shared="local",
                                local_rank=0, local_world_size=2, shared_timeout=0.1)
        base = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0)
        opt4store.CachedDataset(dataset, owner, opt4store.PlannedSampler(base, epochs=1))
        assert owner.is_owner and os.path.exists(ours) and os.path.exists(theirs)
        with pytest.warns(RuntimeWarning, match="never attached"):
            owner.close()
        assert os.path.exists(theirs) and not os.path.exists(ours)
    finally:
        os.remove(theirs)


def test_reader_times_out_without_an_owner(tmp_path):
    dataset = UniformDataset(64, 4)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1)
    sampler = opt4store.PlannedSampler(base, epochs=1)
    store = opt4store.Store(tmp_path / "store", ram_items=8, disk=0, shared="local",
                            local_rank=1, local_world_size=2, shared_timeout=0.3)
    with pytest.raises(opt4store.Error, match="waited"):
        opt4store.CachedDataset(dataset, store, sampler)


def test_shared_store_single_process_is_a_plain_store(tmp_path):
    """shared='local' with one local rank (no torchrun): an ordinary store."""
    dataset = UniformDataset(64, 4)
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(dataset), epochs=1)
    env = {k: os.environ.pop(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if k in os.environ}
    try:
        with opt4store.Store(tmp_path / "store", ram_items=64, disk=0, shared="local") as store:
            ds = opt4store.CachedDataset(dataset, store, sampler)
            for index in sampler:
                assert torch.equal(ds[index], uniform_item(index, 4))
            assert store.stats()["source_loads"] == 64
            assert store.stats()["drift"] == 0
    finally:
        os.environ.update(env)


@pytest.mark.parametrize("local_world_size, warned", [("2", True), ("1", False), (None, False)])
def test_a_ddp_rank_with_a_store_of_its_own_is_told_to_share(tmp_path, monkeypatch,
                                                              local_world_size, warned):
    """A DistributedSampler's rank that binds a store without shared=, with
    torchrun's LOCAL_WORLD_SIZE saying other ranks share the host: one
    warning naming shared="local" (bench/ddp_bench.py's per_rank case
    decodes 1.85 N); none with one rank a host or outside torchrun."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    if local_world_size is not None:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_world_size)
    dataset = UniformDataset(64, 4)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=WORLD, rank=0, seed=SEED)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with opt4store.Store(tmp_path / "store", ram_items=64, disk=0) as store:
            opt4store.CachedDataset(dataset, store, opt4store.PlannedSampler(base, epochs=1))
    told = [w for w in caught if 'shared="local"' in str(w.message)]
    assert len(told) == int(warned), [str(w.message) for w in caught]
    if warned:
        assert told[0].category is RuntimeWarning
        assert "LOCAL_WORLD_SIZE=2" in str(told[0].message)


# ---------------------------------------------------------------- closing a shared store


class _SlowDataset(UniformDataset):
    """A source that takes 3 ms an item, as a decode would."""

    def __getitem__(self, i):
        time.sleep(0.003)
        return super().__getitem__(i)


def _owner_main(config_path):
    """Local rank 0 of 2 (the handle goes by file): reads its half of an
    epoch once the reader rank has bound the store, then closes at once,
    and writes what its close saw."""
    with open(config_path) as f:
        cfg = json.load(f)
    dataset = UniformDataset(N, NUMEL)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=WORLD, rank=0, seed=SEED)
    sampler = opt4store.PlannedSampler(base, epochs=1)
    store = opt4store.Store(cfg["path"], ram_items=N // 4, disk="64MiB", shared="local",
                            local_rank=0, local_world_size=WORLD,
                            shared_timeout=cfg["shared_timeout"])
    ds = opt4store.CachedDataset(dataset, store, sampler)
    while not os.path.exists(cfg["bound"]):
        time.sleep(0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cfg.get("fail"):
            try:
                with store:  # training fails inside the store's with block
                    raise RuntimeError("a failed step")
            except RuntimeError:
                pass
        else:
            for index in sampler:
                assert torch.equal(ds[index], uniform_item(index, NUMEL))
            store.close()
    with open(cfg["results"], "w") as f:
        json.dump({"accesses": store.stats()["accesses"],
                   "warnings": [str(w.message) for w in caught]}, f)


def _start_owner(tmp_path, shared_timeout, fail=False):
    cfg = {"path": str(tmp_path / "store"), "bound": str(tmp_path / "bound"),
           "results": str(tmp_path / "owner.json"), "shared_timeout": shared_timeout,
           "fail": fail}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = "import sys, test_ddp; test_ddp._owner_main(sys.argv[1])"
    owner = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "config.json")],
                             env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    dataset = _SlowDataset(N, NUMEL)
    base = torch.utils.data.DistributedSampler(dataset, num_replicas=WORLD, rank=1, seed=SEED)
    sampler = opt4store.PlannedSampler(base, epochs=1)
    store = opt4store.Store(cfg["path"], shared="local", local_rank=1, local_world_size=WORLD,
                            shared_timeout=60)
    ds = opt4store.CachedDataset(dataset, store, sampler)
    assert not store.is_owner
    (tmp_path / "bound").touch()
    return owner, cfg, store, ds, sampler


def _owner_result(owner, cfg):
    out = owner.communicate(timeout=120)[0]
    assert owner.returncode == 0, out
    with open(cfg["results"]) as f:
        return json.load(f)


def test_the_owner_close_waits_for_the_other_local_ranks(tmp_path):
    """close() on every rank, the owner's first: it returns once the reader
    rank, still loading its half (3 ms an item), has closed, so that
    everything that rank loaded is on disk and counted in the owner's
    closing stats. (Closing at once, as before, lost most of its Puts.)"""
    owner, cfg, store, ds, sampler = _start_owner(tmp_path, shared_timeout=60)
    for index in sampler:
        assert torch.equal(ds[index], uniform_item(index, NUMEL))
    store.close()
    result = _owner_result(owner, cfg)
    assert result == {"accesses": N, "warnings": []}
    with opt4store.Store(cfg["path"]) as reopened:
        assert reopened.stats()["disk_items"] == N


def test_the_owner_close_gives_up_on_a_rank_that_never_closes(tmp_path):
    """A reader rank that neither reads nor closes for shared_timeout
    seconds: the owner's close warns, naming its pid, and closes; the
    reader's values stay right (it loads from the source)."""
    owner, cfg, store, ds, sampler = _start_owner(tmp_path, shared_timeout=0.5)
    try:
        result = _owner_result(owner, cfg)
        assert len(result["warnings"]) == 1, result
        assert f"pid {os.getpid()}" in result["warnings"][0]
        assert "not cached" in result["warnings"][0]
        for index in list(sampler)[:8]:
            assert torch.equal(ds[index], uniform_item(index, NUMEL))
    finally:
        store.close()


def test_an_owner_that_fails_inside_its_with_block_closes_at_once(tmp_path):
    """Rank 0 raises inside `with store:` while the other rank, which
    waits for it in DDP's next collective, keeps the store open: the
    owner's close does not wait for that rank (it waited shared_timeout,
    30 s by default, then warned that the healthy rank held it)."""
    owner, cfg, store, ds, sampler = _start_owner(tmp_path, shared_timeout=20, fail=True)
    try:
        result = _owner_result(owner, cfg)  # returns while this rank holds the store
        assert result == {"accesses": 0, "warnings": []}
        for index in list(sampler)[:8]:  # served still: loaded from the source
            assert torch.equal(ds[index], uniform_item(index, NUMEL))
    finally:
        store.close()


@needs_gloo
def test_local_ranks_that_make_their_store_with_other_arguments_are_refused(tmp_path):
    """Every local rank opens local rank 0's store: a rank whose Store(...)
    names another path (or other settings) was attached to rank 0's store
    silently, its own never made. Now binding raises on both ranks, naming
    what differs."""
    paths = [str(tmp_path / "store_a"), str(tmp_path / "store_b")]
    results, _ = _run_ranks(tmp_path, ram_items=N, disk="16MiB", workers=0, exchange="group",
                            rank_paths=paths)
    for r in results:
        assert "other arguments than local rank 0" in r["error"], r
        assert f"path={paths[1]!r} (local rank 0: {paths[0]!r})" in r["error"], r
        assert r["bound"] is False
    assert not os.path.exists(paths[1])
