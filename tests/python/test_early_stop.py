"""A loop that stops before its epoch ends (a step limit, Lightning's
limit_train_batches, a validation break): opt4store.DataLoader's workers
have loaded batches ahead of it, up to num_workers x prefetch_factor, some
done and waiting, some in progress. Each of those loads is kept: an item
is loaded from the source once in the whole run, whatever the loop stopped
ahead of (before, the loader dropped them and loaded the items again when
next read: 19 and 72 items twice in bench-like runs of 4 epochs)."""

import collections
import os
import time

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, uniform_item

N = 240
BATCH = 8
STEPS = 5  # of N // BATCH = 30 batches an epoch
EPOCHS = 4


class Logged(UniformDataset):
    """uniform_item(i), each load's index appended to a file (across
    processes), after `pause` seconds; (item, i) so a batch names its rows."""

    def __init__(self, n, log, pause):
        super().__init__(n)
        self.log, self.pause = os.fspath(log), pause

    def __getitem__(self, i):
        time.sleep(self.pause)
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, int(i).to_bytes(4, "little"))
        finally:
            os.close(fd)
        return super().__getitem__(i), int(i)


def loads(log):
    with open(log, "rb") as f:
        return collections.Counter(np.frombuffer(f.read(), dtype=np.uint32).tolist())


# (seconds a load takes, seconds the loop spends on a batch): the loop
# waiting on the workers (they are mid-job when it stops), or the workers
# waiting on the loop (their jobs are done, their results queued).
PACES = {"loads-slower": (0.004, 0.0), "loop-slower": (0.0, 0.02)}


# Spawned workers (each starts in ~2 s here) at one pace.
CASES = [(pace, persistent, "fork") for pace in sorted(PACES) for persistent in (False, True)] + \
    [("loop-slower", True, "spawn")]


@pytest.mark.parametrize("pace,persistent,context", CASES,
                         ids=[f"{c[0]}-{'persistent' if c[1] else 'fresh'}-{c[2]}" for c in CASES])
def test_an_item_is_loaded_once_though_each_epoch_stops_early(tmp_path, pace, persistent,
                                                            context):
    load_s, step_s = PACES[pace]
    log = tmp_path / "loads"
    store = opt4store.Store(None, ram_items=N)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(3)),
        epochs=EPOCHS + 1)
    ds = opt4store.CachedDataset(Logged(N, log, load_s), store, sampler)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, num_workers=2,
                                  persistent_workers=persistent, multiprocessing_context=context)
    try:
        read = set()
        for epoch in range(EPOCHS):
            for step, (values, indices) in enumerate(loader):
                for value, i in zip(values, indices.tolist()):
                    assert torch.equal(value, uniform_item(i)), (epoch, i)
                read.update(indices.tolist())
                time.sleep(step_s)
                if step + 1 == STEPS:
                    break
            assert sorted(indices.tolist()) == sorted(
                sampler.epoch_ids(epoch)[(STEPS - 1) * BATCH:STEPS * BATCH].tolist())
        # A last whole epoch: every item, each loaded at most once in all.
        assert sum(len(i) for _, i in loader) == N
        store.wait_for_puts()
    finally:
        del loader
        store.close()
    counts = loads(log)
    twice = sorted(i for i, c in counts.items() if c > 1)
    assert twice == [], f"{len(twice)} items loaded more than once: {twice[:10]}"
    assert sorted(counts) == list(range(N))
    assert len(read) < N  # the early stops left items unread until the last epoch
