"""Exact resume: PlannedSampler.state_dict() in the middle of an epoch and
load_state_dict() into the same or a fresh sampler continue at exactly the
next index; a state of another plan is refused."""

import hashlib
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from opt4store import _core
from o4s_testlib import UniformDataset, check_epoch, epoch_then_part_of_the_next, uniform_item

N = 100
BATCH = 10
EPOCHS = 3

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def make_sampler(seed=7, epochs=EPOCHS, replacement=False):
    return opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), replacement=replacement,
                                       generator=torch.Generator().manual_seed(seed)),
        epochs=epochs)


def as_pairs(indices):
    return [(int(i), i.position) for i in indices]


def planned_pairs(sampler, start, stop):
    return [(int(sampler.plan[p]), p) for p in range(start, stop)]


def test_same_seed_records_the_same_plan():
    a, b = make_sampler(), make_sampler()
    assert list(a.plan) == list(b.plan) and a.fingerprint == b.fingerprint
    assert list(make_sampler(seed=8).plan) != list(a.plan)
    assert len(a) == N and len(a.plan) == N * EPOCHS


def _documented_fingerprint(ids):
    """PlanFingerprint as plan.h documents it: 64-bit FNV-1a over the length
    and then each id, each as 8 little-endian bytes; 16 hex digits."""
    h = 0xcbf29ce484222325
    for word in [len(ids), *ids]:
        for byte in (int(word) % 2**64).to_bytes(8, "little"):
            h = ((h ^ byte) * 0x100000001b3) % 2**64
    return f"{h:016x}"


def test_fingerprint_is_the_cpp_plan_fingerprint():
    """Of the plan's first epoch: hashing every epoch would record the whole
    run (PlannedSampler's docstring)."""
    s = make_sampler()
    first = s.plan[:N]
    assert s.fingerprint == _core.plan_fingerprint(first) == _documented_fingerprint(first)
    # The constants tests/plan_test.cc checks the C++ function against.
    assert _core.plan_fingerprint(np.array([3, 1, 4, 1, 5, 9, 2, 6])) == "a11da7398e6bf662"
    assert _core.plan_fingerprint(np.empty(0, np.int64)) == "a8c7f832281a39c5"
    assert _core.plan_fingerprint(np.array([-1])) == _documented_fingerprint([2**64 - 1])
    with pytest.raises(opt4store.InvalidArgumentError):
        _core.plan_fingerprint(np.zeros((2, 2), np.int64))


def test_state_saved_with_a_sha1_fingerprint_is_refused_clearly():
    """Before PlanFingerprint the sampler keyed its state with a SHA-1 of the
    plan; such a state cannot be checked against the plan, so it is refused."""
    s = make_sampler()
    state = dict(s.state_dict(), fingerprint=hashlib.sha1(s.plan.tobytes()).hexdigest())
    with pytest.raises(opt4store.InvalidArgumentError, match="older opt4store") as e:
        s.load_state_dict(state)
    assert "SHA-1" in str(e.value) and s.fingerprint in str(e.value)


def test_each_iter_yields_the_next_epoch_with_positions():
    s = make_sampler()
    for epoch in range(EPOCHS):
        got = as_pairs(iter(s))
        assert got == planned_pairs(s, epoch * N, (epoch + 1) * N)
    assert all(isinstance(i, opt4store.PlannedIndex) for i in iter(make_sampler()))
    # Past the recorded epochs the plan grows, in the base sampler's order,
    # with one warning (it raised "all were used": a peek at a batch before
    # the loop made a run crash in its last epoch).
    with pytest.warns(RuntimeWarning, match="past the 3 epochs"):
        got = as_pairs(iter(s))
    assert s.epochs == EPOCHS + 1 and got == planned_pairs(s, EPOCHS * N, (EPOCHS + 1) * N)
    base = torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(7))
    assert s.plan.tolist() == [i for _ in range(EPOCHS + 1) for i in base]


def test_set_epoch_as_ddp_loops_call_it():
    """set_epoch(e) before each epoch: the same epochs; the epoch resumed in
    keeps its place; a later epoch starts at its beginning; an epoch begun
    already is read again from its start (a peek at a batch, then the loop:
    it was refused); one never recorded grows the plan."""
    s = make_sampler()
    for epoch in range(2):
        s.set_epoch(epoch)
        assert as_pairs(iter(s)) == planned_pairs(s, epoch * N, (epoch + 1) * N)
    s.set_epoch(1)
    assert as_pairs(iter(s)) == planned_pairs(s, N, 2 * N)
    with pytest.warns(RuntimeWarning, match="set_epoch.4. is past the 3 epochs"):
        s.set_epoch(4)
    assert s.epochs == 5 and as_pairs(iter(s)) == planned_pairs(s, 4 * N, 5 * N)
    with pytest.raises(TypeError):
        s.set_epoch(1.0)

    resumed = make_sampler()
    with pytest.warns(RuntimeWarning, match="a state of 5 epochs"):  # s grew to 5
        resumed.load_state_dict({**s.state_dict(), "epoch": 1, "index": 30})
    resumed.set_epoch(1)  # the loop's own epoch counter, after a resume
    assert as_pairs(iter(resumed)) == planned_pairs(s, N + 30, 2 * N)

    skipping = make_sampler()
    skipping.set_epoch(2)
    assert as_pairs(iter(skipping)) == planned_pairs(s, 2 * N, 3 * N)


def test_set_epoch_forward_replans_a_bound_store(tmp_path):
    store = opt4store.Store(tmp_path / "store", ram_items=N // 2, disk=0)
    sampler = make_sampler()
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=0)
    try:
        assert check_epoch(loader, sampler.plan, 0, N, BATCH, uniform_item, stacked=True) == []
        sampler.set_epoch(2)
        assert check_epoch(loader, sampler.plan, 2, N, BATCH, uniform_item, stacked=True) == []
        st = store.stats()
        assert st["position"] == 3 * N and st["drift"] == 0 and st["expect_timeouts"] == 0, st
    finally:
        store.close()


@pytest.mark.parametrize("replacement", [False, True])
def test_fresh_sampler_resumes_mid_epoch_at_the_next_index(tmp_path, replacement):
    """num_workers=0: after 4 batches of epoch 1 the state says index 40, and
    a fresh sampler with the same base sampler and seed continues there."""
    store = opt4store.Store(tmp_path / "store", ram_items=N // 2, disk=0)
    sampler = make_sampler(replacement=replacement)
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=0)
    try:
        assert check_epoch(loader, sampler.plan, 0, N, BATCH, uniform_item, stacked=True) == []
        state = sampler.state_dict()
        assert (state["epoch"], state["index"]) == (1, 0)
        it = iter(loader)
        seen = [next(it) for _ in range(4)]
        state = sampler.state_dict()
        assert (state["epoch"], state["index"]) == (1, 4 * BATCH)
        for b, batch in enumerate(seen):
            for j in range(BATCH):
                assert torch.equal(batch[j], uniform_item(sampler.plan[N + b * BATCH + j]))
    finally:
        store.close()

    fresh = make_sampler(replacement=replacement)
    fresh.load_state_dict(state)
    assert fresh.position() == N + 4 * BATCH
    assert as_pairs(iter(fresh)) == planned_pairs(fresh, N + 4 * BATCH, 2 * N)
    assert as_pairs(iter(fresh)) == planned_pairs(fresh, 2 * N, 3 * N)


def test_resume_through_a_reopened_store(tmp_path, counter):
    """Stop mid-epoch, close; a new run with a fresh sampler loaded with the
    state reads on from the next index: right values, no drift, no warning,
    and nothing loaded again that the disk tier holds."""
    options = dict(ram_items=N // 4, disk="32MiB")
    store = opt4store.Store(tmp_path / "store", **options)
    sampler = make_sampler()
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH)
    assert check_epoch(loader, sampler.plan, 0, N, BATCH, uniform_item, stacked=True) == []
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = sampler.state_dict()
    del it, loader
    store.close()
    assert counter.count == N

    store = opt4store.Store(tmp_path / "store", **options)
    fresh = make_sampler()
    fresh.load_state_dict(state)  # before binding: the store is planned from there
    # No spot check: the source calls counted here are the reads' only.
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, fresh, spot_check=0)
    loader = torch.utils.data.DataLoader(ds, sampler=fresh, batch_size=BATCH)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            batches = list(loader)
            assert len(batches) == (N - 3 * BATCH) // BATCH
            for b, batch in enumerate(batches):
                for j in range(BATCH):
                    position = N + 3 * BATCH + b * BATCH + j
                    assert torch.equal(batch[j], uniform_item(fresh.plan[position])), position
            assert check_epoch(loader, fresh.plan, 2, N, BATCH, uniform_item, stacked=True) == []
        st = store.stats()
        assert st["drift"] == 0, st
        assert st["accesses"] == N - 3 * BATCH + N, st
        assert st["source_loads"] == 0, st
        assert counter.count == N
    finally:
        store.close()


def test_load_state_dict_after_binding_replans_the_store(tmp_path):
    store = opt4store.Store(tmp_path / "store", ram_items=N // 4, disk=0)
    sampler = make_sampler()
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH)
    try:
        state = dict(make_sampler().state_dict(), epoch=1, index=5 * BATCH)
        sampler.load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            batches = list(loader)
        assert len(batches) == 5
        for b, batch in enumerate(batches):
            for j in range(BATCH):
                assert torch.equal(batch[j], uniform_item(sampler.plan[N + 5 * BATCH + b * BATCH + j]))
        assert store.stats()["drift"] == 0
    finally:
        store.close()


def test_resume_with_workers_and_consumed(tmp_path):
    """With workers the sampler runs ahead of the loop; consumed= gives the
    exact count."""
    store = opt4store.Store(tmp_path / "store", ram_items=N // 2, disk=0)
    sampler = make_sampler()
    ds = opt4store.CachedDataset(UniformDataset(N), store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                         multiprocessing_context="fork")
    try:
        it = iter(loader)
        for _ in range(3):
            next(it)
        # The workers fetched batches ahead: the count handed out is not
        # what the loop processed, and a state_dict without consumed= says so.
        with pytest.raises(opt4store.InvalidArgumentError, match="consumed="):
            sampler.state_dict()
        state = sampler.state_dict(consumed=3 * BATCH)
        assert (state["epoch"], state["index"]) == (0, 3 * BATCH)
        del it
    finally:
        del loader
        store.close()
    fresh = make_sampler()
    fresh.load_state_dict(state)
    assert as_pairs(iter(fresh)) == planned_pairs(fresh, 3 * BATCH, N)


def test_state_of_another_plan_is_refused():
    state = make_sampler(seed=7).state_dict()
    for other in (make_sampler(seed=8), make_sampler(replacement=True)):
        with pytest.raises(opt4store.InvalidArgumentError, match="another plan"):
            other.load_state_dict(state)
    # Fewer epochs than the state's (saved by a run whose plan grew, or
    # made with more): the same order, grown to the state's epochs.
    fewer = make_sampler(seed=7, epochs=EPOCHS - 1)
    with pytest.warns(RuntimeWarning, match=f"a state of {EPOCHS} epochs"):
        fewer.load_state_dict(state)
    assert fewer.epochs == EPOCHS and fewer.plan.tolist() == make_sampler(seed=7).plan.tolist()
    with pytest.raises(opt4store.InvalidArgumentError):
        make_sampler().load_state_dict({})
    # A refused state leaves the sampler as it was.
    s = make_sampler()
    with pytest.raises(opt4store.Error):
        s.load_state_dict(make_sampler(seed=9).state_dict())
    assert as_pairs(iter(s)) == planned_pairs(s, 0, N)


def test_more_epochs_continue_the_same_order():
    """A run extended at resume: a sampler that records more epochs takes the
    state of one that recorded fewer, continues the same order and has the
    new epochs planned."""
    short = make_sampler()
    longer = make_sampler(epochs=EPOCHS + 2)
    longer.load_state_dict(dict(short.state_dict(), epoch=1, index=30))
    assert as_pairs(iter(longer)) == planned_pairs(short, N + 30, 2 * N)
    assert as_pairs(iter(longer)) == planned_pairs(short, 2 * N, 3 * N)
    assert len(list(iter(longer))) == N  # epochs 3 and 4 are planned too
    assert len(list(iter(longer))) == N


def test_an_unseeded_random_sampler_resumes(tmp_path):
    """RandomSampler without a generator draws from torch's global RNG: the
    PlannedSampler gives it a seed, kept in the state, and a new process's
    sampler records that order again (in place: a CachedDataset bound before
    load_state_dict sees it, so no drift)."""
    first = opt4store.PlannedSampler(torch.utils.data.RandomSampler(range(N)), epochs=EPOCHS)
    state = dict(first.state_dict(), epoch=1, index=20)
    torch.manual_seed(12345)  # another process: another global RNG
    store = opt4store.Store(tmp_path / "store", ram_items=N // 2, disk=0)
    again = opt4store.PlannedSampler(torch.utils.data.RandomSampler(range(N)), epochs=EPOCHS)
    assert again.fingerprint != first.fingerprint
    ds = opt4store.CachedDataset(UniformDataset(N), store, again)
    again.load_state_dict(state)
    assert again.fingerprint == first.fingerprint
    try:
        batches = list(torch.utils.data.DataLoader(ds, sampler=again, batch_size=BATCH))
        got = torch.cat([b[:, 0] for b in batches]).tolist()
        assert got == [uniform_item(int(i))[0].item() for i in first.plan[N + 20:2 * N]]
        assert store.stats()["drift"] == 0
    finally:
        store.close()


def test_one_checkpoint_restores_every_ddp_rank():
    """DDP saves the state once, on rank 0; each rank loads it and resumes
    its own order at the same place."""
    def rank_sampler(rank):
        return opt4store.PlannedSampler(
            torch.utils.data.distributed.DistributedSampler(range(N), num_replicas=2, rank=rank,
                                                            seed=3), epochs=EPOCHS)
    saved = dict(rank_sampler(0).state_dict(), epoch=1, index=10)
    for rank in (0, 1):
        s = rank_sampler(rank)
        s.load_state_dict(saved)
        half = N // 2
        assert as_pairs(iter(s)) == planned_pairs(s, half + 10, 2 * half)
    with pytest.raises(opt4store.InvalidArgumentError, match="another plan"):
        other_seed = opt4store.PlannedSampler(
            torch.utils.data.distributed.DistributedSampler(range(N), num_replicas=2, rank=1,
                                                            seed=4), epochs=EPOCHS)
        other_seed.load_state_dict(saved)


@pytest.mark.parametrize("disk", [0, "16MiB"], ids=["ram-only", "disk"])
def test_a_rollback_in_the_same_process_reads_from_ram(tmp_path, counter, disk):
    """A loop that goes back to its last checkpoint (loader.load_state_dict
    mid-epoch, persistent fork workers alive) re-plans the store; what RAM
    holds stays (SetPlan keeps it as OPT would), so with room for every
    item nothing is loaded again, from the source or the disk tier, and
    every value is right."""
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=disk)
    sampler = make_sampler(epochs=EPOCHS)
    ds = opt4store.CachedDataset(UniformDataset(N, counter=counter), store, sampler)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                  multiprocessing_context="fork", persistent_workers=True)
    try:
        checkpoint = epoch_then_part_of_the_next(loader, loader.state_dict, 5)
        assert counter.count == N
        loader.load_state_dict(checkpoint)
        for epoch in range(1, EPOCHS):
            wrong = check_epoch(loader, sampler.plan, epoch, N, BATCH, uniform_item,
                                stacked=True)
            assert wrong == [], wrong[:3]
        stats = store.stats()
        assert counter.count == N, f"{counter.count - N} loaded again after the rollback"
        assert stats["hits_disk"] == 0, stats
        assert stats["hits_ram"] == (EPOCHS - 1) * N + 5 * BATCH, stats
    finally:
        del loader
        store.close()
