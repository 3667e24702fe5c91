"""opt4store.DataLoader yields what torch's DataLoader yields over the same
CachedDataset and sampler: the same batches, in the same order, with the same
nesting, dtypes, shapes and values, the same last partial batch (or none with
drop_last) and the same len(); and it resumes from a state_dict at every
batch boundary."""

import collections
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import assert_same, keep_list, uniform_item

N = 50

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

Pair = collections.namedtuple("Pair", "image label")


def tensor_sample(i):
    return uniform_item(i, 48).view(3, 4, 4)


def uint8_sample(i):
    return (uniform_item(i, 12) * 100).to(torch.uint8).view(3, 4)


def pair_sample(i):
    return (tensor_sample(i), int(i) % 7)


def dict_sample(i):
    return {"x": tensor_sample(i), "y": int(i) * 3, "w": float(i) / 4, "ok": bool(i % 2),
            "name": "sample"}


def namedtuple_sample(i):
    return Pair(tensor_sample(i), int(i))


def array_sample(i):
    return {"a": np.arange(6, dtype=np.int32).reshape(2, 3) + int(i), "t": tensor_sample(i)}


def variable_sample(i):
    return torch.arange(int(i) % 5 + 1, dtype=torch.int64)


SAMPLES = {"tensor": tensor_sample, "uint8": uint8_sample, "pair": pair_sample,
           "dict": dict_sample, "namedtuple": namedtuple_sample, "arrays": array_sample}


class Source(torch.utils.data.Dataset):
    def __init__(self, make, counter=None):
        self.make, self.counter = make, counter

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.counter is not None:
            self.counter.hit()
        return self.make(int(i))


def flip_and_float(value):
    """A cheap random augmentation, drawn from torch's generator."""
    image = value[0] if isinstance(value, tuple) else value
    if torch.rand(()) < 0.5:
        image = image.flip(-1)
    image = image.float() + torch.rand(())
    return (image,) + tuple(value[1:]) if isinstance(value, tuple) else image


def cached(tmp_path, name, make, epochs=2, seed=3, transform=None, ram_items=N // 3,
           disk="16MiB"):
    store = opt4store.Store(tmp_path / name, ram_items=ram_items, disk=disk)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(seed)),
        epochs=epochs)
    return store, sampler, opt4store.CachedDataset(Source(make), store, sampler,
                                                   transform=transform)


def both(tmp_path, make, epochs=2, transform=None, generator_seed=None, **kwargs):
    """torch's batches and ours, epoch by epoch, over twin stores (each
    loader with its own generator seeded generator_seed, when given)."""
    a_store, a_sampler, a_ds = cached(tmp_path, "a", make, epochs, transform=transform)
    b_store, b_sampler, b_ds = cached(tmp_path, "b", make, epochs, transform=transform)
    try:
        for epoch in range(epochs):
            if generator_seed is not None:
                kwargs["generator"] = torch.Generator().manual_seed(generator_seed + epoch)
            torch.manual_seed(100 + epoch)
            theirs = torch.utils.data.DataLoader(a_ds, sampler=a_sampler, **kwargs)
            expected = list(theirs)
            if generator_seed is not None:
                kwargs["generator"] = torch.Generator().manual_seed(generator_seed + epoch)
            torch.manual_seed(100 + epoch)
            ours = opt4store.DataLoader(b_ds, sampler=b_sampler, **kwargs)
            assert len(ours) == len(theirs)
            got = list(ours)
            assert len(got) == len(expected), (epoch, len(got), len(expected))
            for k, (g, e) in enumerate(zip(got, expected)):
                assert_same(g, e, f"epoch {epoch} batch {k}")
        return a_store.stats(), b_store.stats()
    finally:
        a_store.close()
        b_store.close()


# drop_last only for three samples: torch's DataLoader over a CachedDataset
# waits about 4 s at the next epoch for the dropped tail (issue 14).
@pytest.mark.parametrize("sample, batch_size, drop_last",
                         [(name, 10, False) for name in sorted(SAMPLES)] +
                         [(name, 8, False) for name in sorted(SAMPLES)] +
                         [(name, 8, True) for name in ("tensor", "pair", "dict")])
def test_same_batches_as_torch(tmp_path, sample, batch_size, drop_last):
    theirs, ours = both(tmp_path, SAMPLES[sample], batch_size=batch_size, drop_last=drop_last)
    assert ours["drift"] == 0 and ours["expect_timeouts"] == 0, ours


@pytest.mark.parametrize("sample, num_workers, context, persistent", [
    ("pair", 1, "fork", False), ("tensor", 1, "fork", False), ("pair", 3, "fork", False),
    ("tensor", 3, "fork", False), ("pair", 2, "fork", True), ("tensor", 2, "fork", True),
    ("pair", 2, "spawn", False)])
def test_same_batches_with_workers(tmp_path, sample, num_workers, context, persistent):
    theirs, ours = both(tmp_path, SAMPLES[sample], epochs=3, batch_size=8, drop_last=True,
                        num_workers=num_workers, multiprocessing_context=context,
                        persistent_workers=persistent)
    assert ours["source_loads"] == theirs["source_loads"], (ours, theirs)
    assert ours["expect_timeouts"] == 0, ours


def test_custom_collate_and_variable_sizes(tmp_path):
    both(tmp_path, variable_sample, batch_size=8, collate_fn=keep_list)
    both(tmp_path, variable_sample, batch_size=8, collate_fn=keep_list, num_workers=2,
         multiprocessing_context="fork")


def test_variable_sizes_without_collate_fail_as_torch(tmp_path):
    store, sampler, ds = cached(tmp_path, "s", variable_sample, epochs=1)
    with pytest.raises(RuntimeError):
        list(torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=8))
    store2, sampler2, ds2 = cached(tmp_path, "t", variable_sample, epochs=1)
    with pytest.raises(RuntimeError):
        list(opt4store.DataLoader(ds2, sampler=sampler2, batch_size=8))
    store.close()
    store2.close()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sample", ["pair", "tensor"])
def test_seeded_random_transform_matches_torch(tmp_path, sample, num_workers):
    kwargs = dict(multiprocessing_context="fork") if num_workers else {}
    both(tmp_path, SAMPLES[sample], epochs=2, transform=flip_and_float, batch_size=8,
         num_workers=num_workers, generator_seed=9, **kwargs)


def test_one_persistent_loader_with_a_transform_matches_torch(tmp_path):
    """The loader kept for the run with persistent_workers=True (what
    README advises with a transform): its workers' random draws go on from
    epoch to epoch as torch's persistent workers' do."""
    epochs = 3
    stores, loaders = [], []
    for name, make_loader in (("a", torch.utils.data.DataLoader), ("b", opt4store.DataLoader)):
        store, sampler, ds = cached(tmp_path, name, pair_sample, epochs, transform=flip_and_float)
        stores.append(store)
        loaders.append(make_loader(ds, sampler=sampler, batch_size=8, drop_last=True,
                                   num_workers=2, multiprocessing_context="fork",
                                   persistent_workers=True,
                                   generator=torch.Generator().manual_seed(9)))
    try:
        for epoch in range(epochs):
            torch.manual_seed(100 + epoch)
            expected = list(loaders[0])
            torch.manual_seed(100 + epoch)
            got = list(loaders[1])
            assert len(got) == len(expected) == N // 8
            for k, (g, e) in enumerate(zip(got, expected)):
                assert_same(g, e, f"epoch {epoch} batch {k}")
    finally:
        for store in stores:
            store.close()


def test_an_all_hit_epoch_starts_no_worker(tmp_path, monkeypatch):
    store, sampler, ds = cached(tmp_path, "s", tensor_sample, epochs=2, ram_items=N)
    started = []
    real = torch.utils.data.DataLoader.__iter__

    def spy(self):
        started.append(self.num_workers)
        return real(self)

    monkeypatch.setattr(torch.utils.data.DataLoader, "__iter__", spy)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2,
                                  multiprocessing_context="fork")
    list(loader)
    # Epoch 1: the first sample's worker (its layout), then the workers for the misses.
    assert started == [1, 2]
    list(loader)
    assert started == [1, 2]  # epoch 2: every sample a hit, no workers
    st = store.stats()
    assert st["source_loads"] == N and st["hits_ram"] == N, st
    store.close()


@pytest.mark.parametrize("sample", ["pair", "dict", "arrays"])
def test_workers_leave_storing_to_the_loader(tmp_path, monkeypatch, sample):
    """A value a worker loads and writes into its batch slot is stored by
    the loader from the slot (Store.put_rows), not by the worker (but the
    epoch's first, which shows the layout before there are slots): stored
    once, and read back equal in the next epoch, from RAM and from disk."""
    store, sampler, ds = cached(tmp_path, "s", SAMPLES[sample], epochs=2, ram_items=N // 3)
    main = os.getpid()
    worker_puts = multiprocessing.get_context("fork").Value("i", 0)
    real_put = opt4store.Store.put

    def counting_put(self, position, index, value):
        if os.getpid() != main:
            with worker_puts.get_lock():
                worker_puts.value += 1
        return real_put(self, position, index, value)

    monkeypatch.setattr(opt4store.Store, "put", counting_put)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2,
                                  multiprocessing_context="fork")
    list(loader)
    st = store.stats()
    assert worker_puts.value == 1  # the first sample's, by the worker started for it
    assert st["puts"] == N and st["source_loads"] == N, st
    for epoch_batches in (list(loader),):
        for k, batch in enumerate(epoch_batches):
            ids = sampler.plan[N + k * 8:N + (k + 1) * 8]
            expected = torch.utils.data.default_collate([SAMPLES[sample](int(i)) for i in ids])
            assert_same(batch, expected, f"batch {k}")
    st = store.stats()
    assert st["source_loads"] == N and st["hits_ram"] + st["hits_disk"] == N, st
    assert st["hits_disk"] > 0, st
    store.close()


def test_put_rows_stores_what_read_into_reads(tmp_path):
    """put_rows stores rows of leaf tensors as values equal to the samples
    they were written from; read_into reads them back into other rows."""
    from opt4store import _batch_layout
    store = opt4store.Store(tmp_path / "s", ram_items=4, disk="16MiB")
    store.bind(N)
    layout = _batch_layout.layout_of(dict_sample(0))
    leaves = layout.empty(3, False)
    for row, i in enumerate((5, 9, 11)):
        assert layout.write_row(leaves, row, dict_sample(i))
    positions = np.full(3, opt4store.NO_POSITION, dtype=np.uint64)
    store.put_rows(positions, [5, 9, 11], [0, 1, 2], layout.meta, layout.payload_bytes,
                   layout.offsets, leaves)
    for i in (5, 9, 11):
        assert_same(store.get(opt4store.NO_POSITION, i), dict_sample(i))
    back = layout.empty(3, False)
    codes = store.read_into(positions, [11, 5, 9], [0, 1, 2], layout.meta,
                            layout.payload_bytes, layout.offsets, back)
    assert list(codes) == [0, 0, 0]
    assert_same(layout.nest(back), torch.utils.data.default_collate(
        [dict_sample(i) for i in (11, 5, 9)]))
    with pytest.raises(opt4store.Error, match="row 3"):
        store.put_rows(positions[:1], [1], [3], layout.meta, layout.payload_bytes,
                       layout.offsets, leaves)
    with pytest.raises(opt4store.Error, match="past the payload"):
        store.put_rows(positions[:1], [1], [0], layout.meta, 8, layout.offsets, leaves)
    # leaves of no rows: nothing to read or store (their row size divided
    # numel by 0 rows, and the process died of SIGFPE)
    empty = [leaf[:0] for leaf in leaves]
    assert len(store.read_into([], [], [], layout.meta, layout.payload_bytes, layout.offsets,
                               empty)) == 0
    store.put_rows([], [], [], layout.meta, layout.payload_bytes, layout.offsets, empty)
    with pytest.raises(opt4store.Error, match="row 0"):
        store.read_into(positions[:1], [5], [0], layout.meta, layout.payload_bytes,
                        layout.offsets, empty)
    store.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_at_every_batch_boundary(tmp_path, num_workers):
    kwargs = dict(multiprocessing_context="fork") if num_workers else {}
    batch_size = 8
    store, sampler, ds = cached(tmp_path, "ref", pair_sample, epochs=2)
    reference = [b for _ in range(2) for b in
                 opt4store.DataLoader(ds, sampler=sampler, batch_size=batch_size, drop_last=True)]
    store.close()
    per_epoch = N // batch_size
    for stop in range(0, 2 * per_epoch + 1, 3):
        store, sampler, ds = cached(tmp_path, f"run{stop}", pair_sample, epochs=2)
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=batch_size,
                                      drop_last=True, num_workers=num_workers, **kwargs)
        seen, state = 0, loader.state_dict()
        for _ in range(2):
            for batch in loader:
                if seen == stop:
                    break
                seen += 1
                state = loader.state_dict()
            if seen == stop:
                break
        store.close()
        # A new process's view: a new store, sampler and loader from the state.
        store, sampler, ds = cached(tmp_path, f"run{stop}", pair_sample, epochs=2)
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=batch_size,
                                      drop_last=True, num_workers=num_workers, **kwargs)
        loader.load_state_dict(state)
        rest = []
        while len(rest) < 2 * per_epoch - stop:
            rest += list(loader)
        for k, batch in enumerate(rest):
            assert_same(batch, reference[stop + k], f"resumed at {stop}: batch {stop + k}")
        store.close()


def test_worker_error_reaches_the_loop_with_its_traceback(tmp_path):
    def boom(i):
        if i == 17:
            raise KeyError("sample 17 is broken")
        return tensor_sample(i)

    store, sampler, ds = cached(tmp_path, "s", boom, epochs=1)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2,
                                  multiprocessing_context="fork")
    with pytest.raises(KeyError) as e:
        list(loader)
    assert "sample 17 is broken" in str(e.value)
    assert "boom" in str(e.value)  # the worker's traceback, as torch shows it
    store.close()


def doubled(value):
    return value[0].float() * 2, value[1]


@pytest.mark.parametrize("workers, transform, ram_items", [
    ((0, 0, 0), None, N), ((2, 2, 2), None, N // 3), ((2, 2, 2), doubled, N),
    ((2, 0, 0), None, N)])
def test_kept_batches_and_views_stay_right(tmp_path, workers, transform, ram_items):
    """Batch memory is reused only when nothing references it: neither the
    batch, nor a view of it kept by the loop. With workers, batches are the
    workers' shared slots lent out (every batch with a transform; the misses'
    batches without); kept ones must never be written again. After a
    workers' epoch, all-hit batches borrow those slots (2, 0, 0)."""
    store, sampler, ds = cached(tmp_path, "s", pair_sample, epochs=3, ram_items=ram_items,
                                transform=transform)
    views, kept = [], []
    before = set(multiprocessing.active_children())  # other tests' persistent workers

    def expected(ids):
        images = torch.stack([tensor_sample(int(i)) for i in ids])
        return images if transform is None else images.float() * 2

    for epoch in range(3):
        for k, (images, labels) in enumerate(opt4store.DataLoader(
                ds, sampler=sampler, batch_size=8, num_workers=workers[epoch])):
            ids = sampler.plan[epoch * N + k * 8:epoch * N + min((k + 1) * 8, N)]
            assert_same(images, expected(ids))
            views.append((images[1:3], ids[1:3]))  # a view: the batch itself is dropped
            if k % 2:
                kept.append((images, labels, ids))
        assert set(multiprocessing.active_children()) <= before  # the epoch's workers are gone
    for view, ids in views:
        assert_same(view, expected(ids))
    for images, labels, ids in kept:
        assert_same(images, expected(ids))
        assert labels.tolist() == [int(i) % 7 for i in ids]
    store.close()


def test_an_abandoned_epoch_frees_its_workers_and_slots(tmp_path):
    """A loop that breaks with jobs in flight: the workers are joined before
    their slots are taken again, so the next epochs' batches are right."""
    store, sampler, ds = cached(tmp_path, "s", pair_sample, epochs=3, transform=doubled)
    before = set(multiprocessing.active_children())  # other tests' persistent workers
    for epoch in range(3):
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=4, num_workers=2)
        for k, (images, _) in enumerate(loader):
            ids = sampler.plan[epoch * N + k * 4:epoch * N + (k + 1) * 4]
            assert_same(images, torch.stack([tensor_sample(int(i)) for i in ids]).float() * 2)
            if epoch < 2 and k == 2:
                break
        del loader
        assert set(multiprocessing.active_children()) <= before
    store.close()


def test_batches_with_one_miss_each_add_no_slots(tmp_path):
    """The workers' jobs ahead span as many batches as torch keeps ahead,
    whatever the misses a batch: with one miss in each batch, the loader
    makes no slot beyond those it started with, and every batch is right."""
    store, sampler, ds = cached(tmp_path, "s", pair_sample, epochs=1, ram_items=N)
    order = sampler.plan[:N].tolist()
    missing = set(order[::5])  # one in each batch of 5
    for i in set(order) - missing:
        store.put(opt4store.NO_POSITION, i, pair_sample(i))
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=5, num_workers=2,
                                  multiprocessing_context="fork")
    for k, batch in enumerate(loader):
        expected = [pair_sample(i) for i in order[k * 5:(k + 1) * 5]]
        assert_same(batch, torch.utils.data.default_collate(expected), f"batch {k}")
    slots = loader._slots
    assert len(slots.tensors) == slots.known, (len(slots.tensors), slots.known)
    assert store.stats()["source_loads"] == len(missing)
    store.close()


class _ReadAheadSpy:
    """Counts the read-ahead jobs a store starts and those joined (waited)."""

    def __init__(self, store):
        self.started, self.joined = 0, set()
        real = store.batch_reader_async

        def reader():
            read = real()
            if read is None:
                return None

            def start(*args):
                self.started += 1
                return _SpiedJob(read(*args), self, self.started)
            return start

        store.batch_reader_async = reader

    def in_flight(self):
        return self.started - len(self.joined)


class _SpiedJob:
    def __init__(self, job, spy, number):
        self.job, self.spy, self.number = job, spy, number

    def wait(self):
        codes = self.job.wait()
        self.spy.joined.add(self.number)
        return codes


@pytest.mark.parametrize("num_workers", [0, 2])
def test_read_ahead_of_hits_ends_with_its_epoch(tmp_path, num_workers):
    """In an epoch of hits, batch k + 1 is read while the loop holds batch
    k: every batch is right, a batch kept across the next one is not
    overwritten, and no read is left running when the epoch ends, breaks off
    or raises."""
    store, sampler, ds = cached(tmp_path, "s", pair_sample, epochs=4, ram_items=N)
    spy = _ReadAheadSpy(store)
    kwargs = dict(multiprocessing_context="fork") if num_workers else {}
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=4, num_workers=num_workers,
                                  **kwargs)
    list(loader)  # epoch 1 loads
    for epoch in (1, 2, 3):
        kept = []
        it = iter(loader)
        for k, batch in enumerate(it):
            ids = sampler.plan[epoch * N + k * 4:epoch * N + min(N, (k + 1) * 4)]
            expected = torch.utils.data.default_collate([pair_sample(int(i)) for i in ids])
            assert_same(batch, expected, f"epoch {epoch} batch {k}")
            kept.append((batch, expected))
            # batch k + 1's, from the second batch on (the first step is timed)
            assert spy.in_flight() == (1 if 0 < k and (k + 1) * 4 < N else 0)
            time.sleep(0.002)  # the step: a loop that takes no time reads no batch ahead
            if epoch == 2 and k == 3:
                break  # with batch 4's read in flight
            if epoch == 3 and k == 5:
                with pytest.raises(ZeroDivisionError):
                    it.throw(ZeroDivisionError())
                break
        del it
        assert spy.in_flight() == 0
        for k, (batch, expected) in enumerate(kept):
            assert_same(batch, expected, f"kept batch {k} of epoch {epoch}")
        if epoch == 2:  # the next iter() would go on with epoch 2: start epoch 3
            state = loader.state_dict()
            state["sampler"].update(epoch=3, index=0)
            loader.load_state_dict(state)
    assert spy.started >= N // 4  # epoch 2 alone read 12 batches ahead
    store.close()


def test_a_fork_inside_the_loop_waits_for_the_read_ahead(tmp_path):
    """A process forked while a batch is read ahead (a validation loader's
    workers started inside the training loop) is forked once the read is
    done, so the child inherits no lock held inside the store."""
    store, sampler, ds = cached(tmp_path, "s", pair_sample, epochs=2, ram_items=N)
    spy = _ReadAheadSpy(store)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=4)
    list(loader)
    forked = 0
    for k, batch in enumerate(loader):
        time.sleep(0.002)
        if k >= 2 and spy.in_flight():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            assert spy.in_flight() == 0  # the fork waited for the read
            forked += 1
    assert forked > 0
    store.close()


def test_a_loop_that_takes_no_time_reads_no_batch_ahead(tmp_path):
    store, sampler, ds = cached(tmp_path, "s", pair_sample, epochs=2, ram_items=N)
    spy = _ReadAheadSpy(store)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=4)
    list(loader)
    started = spy.started
    batches = list(loader)  # nothing done with a batch
    assert len(batches) == -(-N // 4)
    assert spy.started == started
    store.close()


def test_closing_the_store_waits_for_the_read_ahead(tmp_path):
    """Store.close() while the loop holds the iterator, with batch 2 read
    ahead (close waits for a read in flight; the race is too short to force
    here): a batch not read by then is a clear error, and no read is left
    running."""
    big = lambda i: torch.full((4, 256, 256), i % 251, dtype=torch.uint8)  # noqa: E731
    store, sampler, ds = cached(tmp_path, "s", big, epochs=2, ram_items=N)
    spy = _ReadAheadSpy(store)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=16)
    list(loader)
    it = iter(loader)
    next(it)
    time.sleep(0.002)  # a step: batch 2 is read ahead while the loop holds batch 1
    next(it)
    assert spy.in_flight() == 1
    store.close()
    assert spy.in_flight() == 0
    with pytest.raises(opt4store.Error, match="closed"):
        for _ in range(N):
            next(it)
    del it


def killed_at_17(i):
    if i == 17 and torch.utils.data.get_worker_info() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return tensor_sample(i)


def test_a_killed_worker_is_an_error_never_a_wrong_batch(tmp_path):
    store, sampler, ds = cached(tmp_path, "s", killed_at_17, epochs=1)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2,
                                  multiprocessing_context="fork", timeout=30)
    got = []
    with pytest.raises(RuntimeError) as e:
        for batch in loader:
            got.append(batch)
    assert "killed" in str(e.value) or "exited unexpectedly" in str(e.value), str(e.value)
    for k, batch in enumerate(got):  # every batch before the error is right
        ids = sampler.plan[k * 8:(k + 1) * 8]
        assert_same(batch, torch.stack([tensor_sample(int(i)) for i in ids]), f"batch {k}")
    assert 17 not in sampler.plan[:len(got) * 8]
    store.close()


def test_arguments_as_torch(tmp_path):
    store, sampler, ds = cached(tmp_path, "s", tensor_sample, epochs=1)
    with pytest.raises(TypeError):
        opt4store.DataLoader(ds, batch_size=8, no_such_option=1)
    with pytest.raises(ValueError):
        opt4store.DataLoader(ds, sampler=sampler, shuffle=True)
    with pytest.raises(ValueError):
        opt4store.DataLoader(ds, persistent_workers=True)
    with pytest.raises(opt4store.InvalidArgumentError):
        opt4store.DataLoader(Source(tensor_sample), batch_size=8)
    assert len(opt4store.DataLoader(ds, batch_size=8)) == 7
    assert len(opt4store.DataLoader(ds, batch_size=8, drop_last=True)) == 6
    store.close()
