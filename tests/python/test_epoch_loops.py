"""Epoch loops as training scripts write them, beside the same loop over
torch's own sampler: a 1-based epoch counter given to set_epoch, a batch
looked at before the loop (next(iter(loader))), with and without
set_epoch. Each iter() of a PlannedSampler begins an epoch, as each iter()
of torch's sampler draws one; a loop that runs past epochs= grows the plan
(one warning) instead of failing in its last epoch, and set_epoch back to
an epoch begun reads it again from its start. The batches equal torch's."""

import warnings

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import CallCounter, UniformDataset, uniform_item

N = 48
BATCH = 8
EPOCHS = 3

pytestmark = pytest.mark.filterwarnings("ignore:opt4store. .* is past the:RuntimeWarning")


class Labeled(UniformDataset):
    """(uniform_item(i), i): a batch says which items it holds."""

    def __getitem__(self, i):
        return super().__getitem__(i), int(i)


def distributed():
    return torch.utils.data.distributed.DistributedSampler(range(N), num_replicas=1, rank=0,
                                                           seed=5)


def shuffled():
    return torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(5))


def run(loop, base, make_loader, cached, workers):
    """The batches `loop` sees, as lists of indices."""
    sampler = base() if not cached else None
    if cached:
        store = opt4store.Store(None, ram_items=N)
        sampler = opt4store.PlannedSampler(base(), epochs=EPOCHS)
        ds = opt4store.CachedDataset(Labeled(N, counter=cached), store, sampler)
    else:
        ds = Labeled(N)
    loader = make_loader(ds, sampler=sampler, batch_size=BATCH, num_workers=workers,
                         multiprocessing_context="fork" if workers else None)
    try:
        return loop(loader, sampler), sampler
    finally:
        del loader
        if cached:
            store.close()


def rows(batch):
    """The item indices of a batch, each checked against its value."""
    values, indices = batch
    for value, i in zip(values, indices.tolist()):
        assert torch.equal(value, uniform_item(i)), i
    return indices.tolist()


def one_based(loader, sampler):
    seen = []
    for epoch in range(1, EPOCHS + 1):
        sampler.set_epoch(epoch)
        seen.append([rows(b) for b in loader])
    return seen


def peek_then_set_epoch(loader, sampler):
    seen = [[rows(next(iter(loader)))]]
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        seen.append([rows(b) for b in loader])
    return seen


def peek_then_loop(loader, sampler):
    seen = [[rows(next(iter(loader)))]]
    for _ in range(EPOCHS):
        seen.append([rows(b) for b in loader])
    return seen


CASES = [(one_based, distributed), (peek_then_set_epoch, distributed),
         (peek_then_loop, shuffled)]


@pytest.mark.parametrize("loop,base", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("kind", ["torch", "opt4store"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_loop_runs_to_its_end_with_the_right_batches(tmp_path, loop, base, kind, workers):
    """Each ran out of epochs ("all were used") or refused set_epoch(0)
    ("only goes forward") before."""
    make_loader = torch.utils.data.DataLoader if kind == "torch" else opt4store.DataLoader
    counter = CallCounter(tmp_path / "calls")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, sampler = run(loop, base, make_loader, counter, workers)
    grew = [str(w.message) for w in caught if "is past the" in str(w.message)]
    if base is distributed:  # its order is a function of the epoch: torch's batches
        assert got == run(loop, base, torch.utils.data.DataLoader, None, 0)[0]
    else:
        # torch's RandomSampler draws a second permutation at an epoch's
        # end, which a peek never reaches, while the plan records whole
        # epochs ahead: the same permutations, not torch's sequence of them.
        for k, batches in enumerate(got[1:], 1):
            assert sum(batches, []) == sampler.epoch_ids(k).tolist()
    assert sum(got[-1], []) != sum(got[-2], [])
    if loop is peek_then_set_epoch:  # epoch 0, looked at, is read again: no growth
        assert grew == [] and sampler.epochs == EPOCHS
    else:
        assert len(grew) == 1 and sampler.epochs == EPOCHS + 1, grew
    # Each item loaded once: later epochs, grown ones too, hit, and so do
    # the items opt4store.DataLoader's workers loaded ahead of a peek
    # (test_early_stop.py).
    assert counter.count == N
