"""opt4store.DataLoader reuses a batch's memory (its pool, its workers'
shared slots) only once nothing the loop was given still sees it: not the
batch, not one view of one of its tensors. The loader tells by weak
references to what it lent, not by reference counts (CPython 3.14 counts
fewer references than 3.13 did for the same objects)."""

import gc
import weakref

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from opt4store import _batch_layout
from o4s_testlib import uniform_item

N = 48

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class Source(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return uniform_item(int(i), 48).view(3, 4, 4), int(i)


def test_a_pool_batch_is_reused_only_once_its_last_view_is_gone():
    pool = _batch_layout._BatchPool([(3, 4)], [torch.float32])
    first = pool.take(2)[0]
    address = first.data_ptr()
    view = first[1:].view(-1)  # one view of the batch is all the loop keeps
    del first
    gc.collect()
    second = pool.take(2)[0]
    assert second.data_ptr() != address  # the view still sees the first
    del second, view
    assert pool.take(2)[0].data_ptr() == address


def test_a_shared_slot_is_held_while_one_view_of_what_it_lent_lives():
    layout = _batch_layout.Layout(torch.zeros(3, 4))
    slots = _batch_layout.SharedSlots(layout, 2, 1)
    assert not slots.held(0)
    lent = slots.lend(0, 2)
    view = lent[0][0]
    del lent
    assert slots.held(0)
    assert slots.take() == 1  # a new slot: slot 0 is still seen
    slots.give_back(1)
    del view
    assert not slots.held(0)
    assert slots.borrow(2) is not None


@pytest.mark.parametrize("num_workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_batches_kept_as_single_views_keep_their_values(tmp_path, num_workers, context):
    """A loop that keeps one view of one leaf of each batch (and drops the
    batch): every view still holds its own batch's values after two
    epochs, though the loader made every later batch meanwhile."""
    store = opt4store.Store(tmp_path / "s", ram_items=N)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(5)),
        epochs=2)
    ds = opt4store.CachedDataset(Source(), store, sampler)
    kwargs = dict(multiprocessing_context=context) if num_workers else {}
    kept = []
    for _ in range(2):
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=8,
                                      num_workers=num_workers, **kwargs)
        for images, labels in loader:
            kept.append((images[2:].view(-1), labels.tolist()))
            del images
    assert len(kept) == 2 * N // 8
    for view, labels in kept:
        expected = torch.stack([uniform_item(i, 48) for i in labels[2:]]).view(-1)
        assert torch.equal(view, expected), labels
    assert np.unique([tuple(labels) for _, labels in kept], axis=0).shape[0] == len(kept)
    store.close()


def test_a_closed_store_keeps_no_batch_slots(tmp_path):
    """The workers' shared slots are kept for the next loader over the same
    data (a loader per epoch), but not past the store's close: a later
    loader (evaluation, say) would find /dev/shm that much smaller."""
    store = opt4store.Store(tmp_path / "s", ram_items=N)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(5)),
        epochs=2)
    ds = opt4store.CachedDataset(Source(), store, sampler)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2,
                                  multiprocessing_context="fork")
    assert len(list(loader)) == N // 8
    slots = _batch_layout.slots_for(loader._layout, 8)
    assert slots is not None  # kept for the next loader
    slots = weakref.ref(slots)
    del loader
    gc.collect()
    assert slots() is not None  # still kept while the store is open
    store.close()
    gc.collect()
    assert slots() is None
