"""PlannedSampler's state at epoch ends and starts, after a resume, out of
range, and after a rollback of a long plan: each checkpoint resumes at
exactly the uninterrupted run's next index, or is refused with nothing
changed."""

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
import opt4store.sampler as sampler_module

N = 40
BATCH = 4
EPOCHS = 3

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class Indices(torch.utils.data.Dataset):
    """Item i is tensor([i]): a batch shows the indices read."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([int(i)])


def seeded(seed=0):
    return torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(seed))


def planned(base=None, epochs=EPOCHS):
    return opt4store.PlannedSampler(seeded() if base is None else base, epochs=epochs)


def position(state):
    return state["epoch"], state["index"]


def bound(tmp_path, sampler, name="store"):
    store = opt4store.Store(tmp_path / name, ram_items=N, disk="16MiB")
    return store, opt4store.CachedDataset(Indices(), store, sampler)


def batches(loader):
    return [b.view(-1).tolist() for b in loader]


def run(sampler):
    """Each epoch's indices, uninterrupted."""
    return [[int(i) for i in sampler] for _ in range(sampler.epochs)]


def rest_of_run(sampler):
    """Every index the sampler yields until its epochs run out."""
    out = []
    while sampler.position() < sampler.epochs * sampler.epoch_length:
        out += [int(i) for i in sampler]
    return out


@pytest.fixture
def lazy(monkeypatch):
    """Every plan counts as long: held a few epochs at a time."""
    monkeypatch.setattr(sampler_module, "WHOLE_PLAN_READS", 0)
    monkeypatch.setattr(sampler_module, "PLANNER_REACH", 0)  # EPOCHS_AHEAD alone


def test_epoch_end_handed_out_to_workers_needs_consumed(tmp_path):
    """Workers fetch ahead: the sampler hands out the whole epoch batches
    before the loop ends, and state_dict() then is refused, not 'next epoch'."""
    store, ds = bound(tmp_path, planned())
    ref = batches(torch.utils.data.DataLoader(ds, sampler=ds.sampler, batch_size=BATCH))
    store.close()

    store, ds = bound(tmp_path, planned(), "workers")
    loader = torch.utils.data.DataLoader(ds, sampler=ds.sampler, batch_size=BATCH, num_workers=2,
                                         multiprocessing_context="fork")
    it = iter(loader)
    got = [next(it).view(-1).tolist() for _ in range(7)]
    assert ds.sampler.handed_out()[1] == N  # 2 workers x 2 batches ahead: all of it
    with pytest.raises(opt4store.InvalidArgumentError, match="set_epoch") as e:
        ds.sampler.state_dict()
    assert "consumed=" in str(e.value)
    state = ds.sampler.state_dict(consumed=7 * BATCH)
    assert position(state) == (0, 28)
    got += [b.view(-1).tolist() for b in it]
    ds.sampler.set_epoch(1)  # at the next epoch's start the count is exact
    assert position(ds.sampler.state_dict()) == (1, 0)
    del it, loader
    store.close()

    store, ds = bound(tmp_path, planned(), "resumed")
    ds.sampler.load_state_dict(state)
    resumed = batches(torch.utils.data.DataLoader(ds, sampler=ds.sampler, batch_size=BATCH))
    assert got[:7] + resumed == ref
    store.close()

    # Read here (no workers), drop_last's tail handed out but never read:
    # the epoch's end counts as done.
    store, ds = bound(tmp_path, planned(base=seeded()), "drop_last")
    loader = torch.utils.data.DataLoader(ds, sampler=ds.sampler, batch_size=7, drop_last=True)
    assert len(batches(loader)) == N // 7
    assert position(ds.sampler.state_dict()) == (1, 0)
    store.close()


def test_consumed_at_an_epoch_start_names_that_epoch(tmp_path):
    ref = run(planned())
    s = planned()
    for epoch in range(2):
        s.set_epoch(epoch)
        assert position(s.state_dict(consumed=0)) == position(s.state_dict()) == (epoch, 0)
        list(s)
    s.set_epoch(2)
    state = s.state_dict(consumed=0)
    assert position(state) == (2, 0)
    t = planned()
    t.load_state_dict(state)
    assert [int(i) for i in t] == ref[2]

    # Skipping ahead from a mid-epoch resume: consumed= counts from the new epoch's start.
    s = planned()
    s.load_state_dict(dict(s.state_dict(), index=5))
    it = iter(s)
    next(it)
    s.set_epoch(2)
    assert position(s.state_dict(consumed=0)) == (2, 0)


def test_consumed_counts_from_the_epoch_start_after_a_resume():
    s = planned()
    s.load_state_dict(dict(s.state_dict(), index=24))
    it = iter(s)
    for _ in range(8):
        next(it)
    with pytest.raises(opt4store.InvalidArgumentError, match="resumed at index 24") as e:
        s.state_dict(consumed=8)  # the loop's own count since the resume
    assert "24 + " in str(e.value)
    assert position(s.state_dict(consumed=24 + 8)) == position(s.state_dict()) == (0, 32)


def test_consumed_past_the_epoch_is_refused():
    s = planned()
    list(s)
    with pytest.raises(opt4store.InvalidArgumentError, match="consumed"):
        s.state_dict(consumed=N + 1)
    assert position(s.state_dict(consumed=N)) == (1, 0)


@pytest.mark.parametrize("epoch, index", [(0, N), (0, N + 5), (1, 2 * N), (EPOCHS, 1),
                                          (EPOCHS + 1, 0), (99, 0)])
def test_out_of_range_states_are_refused_with_nothing_changed(tmp_path, epoch, index):
    ref = run(planned())
    s = planned()
    store, ds = bound(tmp_path, s)
    it = iter(s)
    for _ in range(3):
        ds[next(it)]
    before = s.state_dict()
    with pytest.raises(opt4store.InvalidArgumentError, match="not in this plan"):
        s.load_state_dict(dict(before, epoch=epoch, index=index))
    assert s.state_dict() == before
    loader = torch.utils.data.DataLoader(ds, sampler=s, batch_size=BATCH)
    assert sum(batches(loader), []) == ref[1]  # the store reads the plan, unchanged
    assert store.stats()["drift"] == 0
    finished = dict(before, epoch=EPOCHS, index=0)  # what state_dict() gives after the last epoch
    s.load_state_dict(finished)
    assert s.state_dict() == finished
    store.close()


@pytest.mark.parametrize("make", [
    lambda: torch.utils.data.DistributedSampler(range(N), num_replicas=2, rank=1, seed=3),
    lambda: torch.utils.data.SequentialSampler(range(N)),
    lambda: torch.utils.data.RandomSampler(range(N)),  # PlannedSampler seeds it
], ids=["distributed", "sequential", "unseeded-random"])
def test_rollback_of_a_long_plan_records_it_again(tmp_path, lazy, make):
    s = opt4store.PlannedSampler(make(), epochs=7)
    store, ds = bound(tmp_path, s)
    ref = [[int(i) for i in s.epoch_ids(e)] for e in range(3)]
    loader = torch.utils.data.DataLoader(ds, sampler=s, batch_size=BATCH)
    got = batches(loader)
    it = iter(loader)
    got += [next(it).view(-1).tolist() for _ in range(2)]
    state = s.state_dict()
    assert position(state) == (1, 2 * BATCH)
    del it
    for _ in range(4):
        got += batches(loader)  # epochs 2 to 5: epochs 0 to 3 let go
    assert 1 not in s._window.held()
    s.load_state_dict(state)
    assert s.state_dict() == state
    rest = batches(loader) + batches(loader)
    assert sum(rest, []) == ref[1][2 * BATCH:] + ref[2]
    assert store.stats()["drift"] == 0
    store.close()


def test_rollback_a_generator_cannot_repeat_is_refused_with_nothing_changed(tmp_path, lazy):
    s = planned(epochs=7)  # the caller's seeded generator: its state is not ours to rewind
    ref = run(planned(epochs=7))
    store, ds = bound(tmp_path, s)
    loader = torch.utils.data.DataLoader(ds, sampler=s, batch_size=BATCH)
    batches(loader)
    state = s.state_dict()
    for _ in range(4):
        batches(loader)
    before = s.state_dict()
    with pytest.raises(opt4store.InvalidArgumentError, match="let go") as e:
        s.load_state_dict(state)
    assert type(e.value) is opt4store.InvalidArgumentError
    assert "new PlannedSampler" in str(e.value)
    assert s.state_dict() == before
    assert sum(batches(loader), []) == ref[5]
    assert store.stats()["drift"] == 0
    store.close()


def test_epoch_ids_ahead_keeps_the_epoch_in_progress(lazy):
    ref = run(planned(epochs=8))
    s = planned(epochs=8)
    it = iter(s)
    got = [int(next(it))]
    assert s.epoch_ids(6).tolist() == ref[6]
    # Readers (CachedDataset's drift checks) look the current epoch up.
    assert s.store_plan().planned(5) == ref[0][5]
    assert np.array_equal(s.epoch_ids(0), ref[0])
    got += [int(i) for i in it]
    assert got + rest_of_run(s) == sum(ref, [])


@pytest.mark.parametrize("bad", ["abc", 1.5, True, [3]])
def test_a_seed_that_is_no_integer_is_refused_with_nothing_changed(bad):
    # An unseeded random sampler's state carries the seed PlannedSampler drew.
    saved = opt4store.PlannedSampler(torch.utils.data.RandomSampler(range(N)), epochs=EPOCHS)
    state = saved.state_dict()
    s = opt4store.PlannedSampler(torch.utils.data.RandomSampler(range(N)), epochs=EPOCHS)
    before = s.state_dict()
    with pytest.raises(opt4store.InvalidArgumentError, match="seed"):
        s.load_state_dict(dict(state, seed=bad))
    assert s.state_dict() == before
    s.load_state_dict(dict(state, seed=np.int64(state["seed"])))  # numpy's integers are integers
    assert run(s) == run(saved)


def test_a_cluster_stores_reads_tell_state_dict_what_was_read(tmp_path):
    # One host's cluster store plans itself (PlannedSampler.use_positions):
    # state_dict() without consumed= checks what was read here against its
    # positions, as for any store (before: never, so a checkpoint taken while
    # workers had drawn batches ahead resumed past samples never trained on).
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        base = torch.utils.data.DistributedSampler(range(N), num_replicas=1, rank=0, seed=3)
        s = opt4store.PlannedSampler(base, epochs=EPOCHS)
        store = opt4store.Store(tmp_path / "store", ram_items=N, shared="cluster",
                                local_rank=0, local_world_size=1)
        ds = opt4store.CachedDataset(Indices(), store, s)
        loader = torch.utils.data.DataLoader(ds, sampler=s, batch_size=BATCH, num_workers=2,
                                             multiprocessing_context="fork")
        it = iter(loader)
        first = next(it).view(-1).tolist()
        with pytest.raises(opt4store.InvalidArgumentError, match="consumed="):
            s.state_dict()
        assert position(s.state_dict(consumed=BATCH)) == (0, BATCH)
        del it
        s.load_state_dict(s.state_dict(consumed=BATCH))
        read = sum(batches(torch.utils.data.DataLoader(ds, sampler=s, batch_size=BATCH)), [])
        assert len(first + read) == N and sorted(first + read) == list(range(N))
        assert position(s.state_dict()) == (1, 0)  # read here, to the epoch's end
        store.close()
    finally:
        dist.destroy_process_group()
