"""opt4store.DataLoader(batch_sampler=...) over the CachedDataset's
PlannedSampler: the loader draws the batch sampler's whole epoch at its
start, so the PlannedSampler inside has then handed out every index; the
loader tells it how far the loop got, so that sampler.state_dict() and
loader.state_dict() taken in the loop's body are those of torch's
DataLoader without workers, and a resume in a fresh store and loader yields
exactly the batches not yet yielded. A sampler that draws past its len()
(an endless one) is refused when the epoch starts."""

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, assert_resumes_after, assert_same, record_run

N, BATCH, EPOCHS = 40, 4, 2

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class SubclassBatches(torch.utils.data.BatchSampler):
    """A user's BatchSampler subclass: not torch's own type, so the loader
    cannot cut its batches from the plan's arrays."""

    def __iter__(self):
        for batch in super().__iter__():
            yield list(batch)


class CyclingBatches:
    """Batches of 3, 5 and 4 indices in turn, from `.sampler`."""
    sizes = (3, 5, 4)

    def __init__(self, sampler):
        self.sampler = sampler
        self.iterations = 0

    def __iter__(self):
        self.iterations += 1
        batch, k = [], 0
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.sizes[k % len(self.sizes)]:
                yield batch
                batch, k = [], k + 1
        if batch:
            yield batch

    def __len__(self):
        rest, count, k = len(self.sampler), 0, 0
        while rest > 0:
            rest -= self.sizes[k % len(self.sizes)]
            count, k = count + 1, k + 1
        return count


class ElsewhereBatches:
    """Keeps the PlannedSampler under another name than `.sampler`: the
    loader finds it as the CachedDataset's."""

    def __init__(self, sampler):
        self.order = sampler

    def __iter__(self):
        yield from torch.utils.data.BatchSampler(self.order, BATCH, False)

    def __len__(self):
        return len(torch.utils.data.BatchSampler(self.order, BATCH, False))


class GrowingBatches(torch.utils.data.BatchSampler):
    """Batches of 4 indices in the first epoch, 7 in the next: larger
    batches than the slots made for the first epoch."""

    def __iter__(self):
        yield from torch.utils.data.BatchSampler(self.sampler, self.batch_size, False)
        self.batch_size += 3


def make_batches(kind, sampler):
    if kind == "subclass":
        return SubclassBatches(sampler, BATCH, False)
    if kind == "subclass_drop_last":
        return SubclassBatches(sampler, 6, True)
    if kind == "cycling":
        return CyclingBatches(sampler)
    if kind == "elsewhere":
        return ElsewhereBatches(sampler)
    if kind == "growing":
        return GrowingBatches(sampler, BATCH, False)
    return torch.utils.data.BatchSampler(sampler, BATCH, False)


def cached(path):
    store = opt4store.Store(path, ram_items=N, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(5)),
        epochs=EPOCHS + 1)
    return store, sampler, opt4store.CachedDataset(UniformDataset(N, numel=8), store, sampler)


def reference(path, kind):
    """torch's DataLoader without workers over the same CachedDataset: its
    batches over EPOCHS epochs, and sampler.state_dict() taken in the loop's
    body at each batch."""
    store, sampler, ds = cached(path)
    loader = torch.utils.data.DataLoader(ds, batch_sampler=make_batches(kind, sampler))
    batches, states = record_run(loader, sampler.state_dict, EPOCHS)
    store.close()
    return batches, states


def states_at(loader, sampler, stop, expected, expected_state):
    """(sampler.state_dict(), loader.state_dict()) in the loop's body at
    batch `stop`, counted over every epoch; checks each batch on the way,
    and the sampler's state against expected_state."""
    seen = 0
    for _ in range(EPOCHS):
        for batch in loader:
            assert_same(batch, expected[seen], f"batch {seen}")
            if seen == stop:
                state = sampler.state_dict()
                assert state == expected_state, f"sampler.state_dict() at batch {stop}"
                return state, loader.state_dict()
            seen += 1
    raise AssertionError(f"no batch {stop}")


# Not "cycling": its place in the cycle is its own state, not the sampler's.
KINDS = ["subclass", "subclass_drop_last", "elsewhere", "torch"]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_mid_epoch_resumes_at_the_next_batch(tmp_path, kind, num_workers):
    batches, states = reference(tmp_path / "reference", kind)
    per_epoch = len(batches) // EPOCHS
    for k, stop in enumerate((1, per_epoch - 1, per_epoch + 2)):
        path = tmp_path / f"run{stop}"
        store, sampler, ds = cached(path)
        loader = opt4store.DataLoader(ds, batch_sampler=make_batches(kind, sampler),
                                      num_workers=num_workers)
        # As torch's, but after an epoch's last batch the next epoch, as
        # with a sampler= (torch's has not yet drawn drop_last's tail).
        expected = dict(states[stop], epoch=1, index=0) if stop == per_epoch - 1 else states[stop]
        sampler_state, loader_state = states_at(loader, sampler, stop, batches, expected)
        assert loader_state == {"sampler": expected}, f"loader.state_dict() at {stop}"
        store.close()
        # A fresh store and loader, resumed from the checkpoint: the rest.
        store, sampler, ds = cached(path)
        loader = opt4store.DataLoader(ds, batch_sampler=make_batches(kind, sampler),
                                      num_workers=num_workers)
        if k % 2 and kind != "elsewhere":  # its sampler is known once an epoch drew it
            loader.load_state_dict(loader_state)
        else:
            sampler.load_state_dict(sampler_state)
        assert_resumes_after(loader, batches, stop)
        store.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_batch_sampler_is_drawn_once_an_epoch(tmp_path, num_workers):
    # Drawing it again (once for the slots' size) would begin the
    # PlannedSampler's next epoch, and draw a random batch sampler's
    # numbers twice. Its batches of 3, 5 and 4 rows share the slots.
    batches, _ = reference(tmp_path / "reference", "cycling")
    store, sampler, ds = cached(tmp_path / "store")
    batch_sampler = CyclingBatches(sampler)
    loader = opt4store.DataLoader(ds, batch_sampler=batch_sampler, num_workers=num_workers)
    got = []
    for epoch in range(EPOCHS):
        got += list(loader)
        assert batch_sampler.iterations == epoch + 1
        assert sampler.state_dict()["epoch"] == epoch + 1
    assert len(got) == len(batches)
    for k, batch in enumerate(got):
        assert_same(batch, batches[k], f"batch {k}")
    store.close()


def test_larger_batches_in_a_later_epoch_with_persistent_workers(tmp_path):
    batches, _ = reference(tmp_path / "reference", "growing")
    store, sampler, ds = cached(tmp_path / "store")
    loader = opt4store.DataLoader(ds, batch_sampler=make_batches("growing", sampler),
                                  num_workers=2, persistent_workers=True)
    got = [batch for _ in range(EPOCHS) for batch in loader]
    assert len(got) == len(batches)
    for k, batch in enumerate(got):
        assert_same(batch, batches[k], f"batch {k}")
    store.close()


@pytest.mark.filterwarnings("ignore:.*not what the plan predicted:RuntimeWarning")
def test_a_batch_sampler_that_skips_the_plannedsampler_leaves_it_alone(tmp_path):
    # The CachedDataset's PlannedSampler is not drawn from: its state is
    # not the loader's to tell, and loader.state_dict() refuses.
    store, sampler, ds = cached(tmp_path / "store")
    loader = opt4store.DataLoader(
        ds, batch_sampler=torch.utils.data.BatchSampler(range(N), BATCH, False))
    for k, _ in enumerate(loader):
        if k == 2:
            break
    assert sampler.state_dict()["epoch"] == 0 and sampler.state_dict()["index"] == 0
    with pytest.raises(opt4store.InvalidArgumentError, match="PlannedSampler"):
        loader.state_dict()
    store.close()


class Endless:
    """mmengine's InfiniteSampler's shape: a len() of one pass, indices
    without end (here, to keep a failing loader from drawing until memory
    runs out, an error 100 passes on)."""

    def __len__(self):
        return N

    def __iter__(self):
        for k in range(100 * N):
            yield k % N
        raise AssertionError("drawn 100 passes past len()")


@pytest.mark.filterwarnings("ignore:.*not what the plan predicted:RuntimeWarning")
@pytest.mark.parametrize("how", ["sampler", "batch_sampler", "items"])
def test_an_endless_sampler_is_refused_at_the_epochs_start(tmp_path, how):
    store, sampler, ds = cached(tmp_path / "store")
    kwargs = {"sampler": {"sampler": Endless(), "batch_size": BATCH},
              "batch_sampler": {"batch_sampler": torch.utils.data.BatchSampler(Endless(), BATCH,
                                                                                False)},
              "items": {"sampler": Endless(), "batch_size": None}}[how]
    loader = opt4store.DataLoader(ds, **kwargs)
    with pytest.raises(opt4store.InvalidArgumentError, match="must end"):
        next(iter(loader))
    store.close()
