"""opt4store.DataLoader draws from torch's random generators what torch's
DataLoader draws, in the same order: the iterator's base seed at iter()
(from generator=, else the global generator; once with persistent
workers), then shuffle's order. So a run seeded with torch.manual_seed or
a generator gets torch's sample order, torch's augmentations and, after
each epoch, torch's global generator (the loop's own draws: dropout)."""

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import MadeDataset

N = 20
BATCH = 5

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def item(i):
    return torch.full((2,), float(i))


def jitter(x):
    return x + torch.rand(())


def run(loader_class, ds, epochs, make_loader_once=False, **kwargs):
    """Each epoch's batches, and torch.rand() after it, from global seed 0."""
    torch.manual_seed(0)
    out, loader = [], None
    for _ in range(epochs):
        if loader is None or not make_loader_once:
            loader = loader_class(ds, batch_size=BATCH, **kwargs)
        out.append(([b.clone() for b in loader], torch.rand(()).item()))
    return out


def assert_same_runs(theirs, ours):
    for epoch, ((t_batches, t_after), (o_batches, o_after)) in enumerate(zip(theirs, ours)):
        assert len(t_batches) == len(o_batches)
        for k, (t, o) in enumerate(zip(t_batches, o_batches)):
            assert torch.equal(t, o), f"epoch {epoch} batch {k}: {t} != {o}"
        assert t_after == o_after, f"epoch {epoch}: the global generator differs afterwards"


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("seeded", [True, False], ids=["generator", "manual_seed"])
def test_shuffle_gives_torchs_order(tmp_path, num_workers, seeded):
    # Before: the order was drawn before the base seed (and, without
    # workers, no base seed at all): every case differed from torch's.
    runs = []
    for name, loader_class in (("a", torch.utils.data.DataLoader), ("b", opt4store.DataLoader)):
        store = opt4store.Store(tmp_path / name, ram_items=N)
        ds = opt4store.CachedDataset(MadeDataset(item, N), store)
        kwargs = dict(shuffle=True, num_workers=num_workers,
                      generator=torch.Generator().manual_seed(1) if seeded else None)
        if num_workers:
            kwargs["multiprocessing_context"] = "fork"
        runs.append(run(loader_class, ds, 2, **kwargs))
        store.close()
    assert_same_runs(*runs)


@pytest.mark.parametrize("num_workers, persistent, transform",
                         [(0, False, jitter), (2, False, jitter), (2, True, jitter),
                          (2, False, None)], ids=["0", "2", "2-persistent", "2-no-transform"])
def test_a_planned_epoch_draws_torchs_augmentations_and_leaves_its_generator(
        tmp_path, num_workers, persistent, transform):
    # A PlannedSampler (its own generator), generator=None, a random
    # transform: in this process without workers (before: shifted draws),
    # in the workers otherwise. The epochs after the first are all hits:
    # without a transform they start no worker (before: nor drew a seed).
    runs = []
    for name, loader_class in (("a", torch.utils.data.DataLoader), ("b", opt4store.DataLoader)):
        store = opt4store.Store(tmp_path / name, ram_items=N)
        base = torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(3))
        sampler = opt4store.PlannedSampler(base, epochs=3)
        ds = opt4store.CachedDataset(MadeDataset(item, N), store, sampler, transform=transform)
        kwargs = dict(sampler=sampler, num_workers=num_workers, persistent_workers=persistent)
        if num_workers:
            kwargs["multiprocessing_context"] = "fork"
        runs.append(run(loader_class, ds, 3, make_loader_once=persistent, **kwargs))
        store.close()
    assert_same_runs(*runs)


def words(i):
    return (f"item {i}", "even" if i % 2 == 0 else "odd")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_samples_without_a_batch_layout_take_torchs_path_with_its_draws(tmp_path, num_workers):
    # Strings only: no tensors to assemble, so torch's DataLoader over the
    # CachedDataset makes the batches (with workers: it failed on the
    # generator argument, the general path's torch loader taking one now).
    runs = []
    for name, loader_class in (("a", torch.utils.data.DataLoader), ("b", opt4store.DataLoader)):
        store = opt4store.Store(tmp_path / name, ram_items=N)
        base = torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(3))
        sampler = opt4store.PlannedSampler(base, epochs=2)
        ds = opt4store.CachedDataset(MadeDataset(words, N), store, sampler)
        kwargs = dict(sampler=sampler, num_workers=num_workers)
        if num_workers:
            kwargs["multiprocessing_context"] = "fork"
        torch.manual_seed(0)
        runs.append([(list(loader_class(ds, batch_size=BATCH, **kwargs)), torch.rand(()).item())
                     for _ in range(2)])
        store.close()
    assert runs[0] == runs[1]
