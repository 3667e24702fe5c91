"""The workers' side of opt4store.DataLoader (loader.py): the jobs handed to
its worker processes, and what a worker does with one.

Only indices go to a worker: a job is (batch number, slot, carried slot,
positions, indices, rows, rows to store now). A worker loads those rows'
samples (misses, or every row with a transform), stores them, and writes
their leaves into the batch's shared slot; it sends back only the batch
number, the rows written, the values of another layout, and the rows it
loaded without storing them. Without a transform, a loaded value that fits
the slot is not stored by the worker: the loader stores it from the slot
(Store.put_rows) when it assembles the batch, so it is not encoded in Python
nor copied through the store's queue. Not so a row whose index the epoch
reads again at a later row ("rows to store now"): a reader of that later
row, in another job, maybe another worker, waits for this row's Put, and
the loader's assembly of this batch may have to wait for that reader's job
(the same batch's other part) or for batches before it: the reader would
wait out its 2 s and load the item again. Such a row is stored by the
worker at once, as torch's DataLoader over a CachedDataset stores every
miss. A job with no slot is drop_last's tail: its misses are loaded and
stored, nothing is written or sent back. Samples this process needs
before the workers run or outside their jobs (an epoch's first, a row let
go after it was found) are loaded in a worker process of their own
(load_in_worker), whose values are sent back.

On the general path (a custom collate_fn, samples of varying shapes,
batch_size=None), torch's DataLoader gets the epoch's batches as PlannedIndex
lists instead (torch_loader), or its items one by one without
auto-collation.
"""

import numpy as np
import torch.utils.data

from ._batch_layout import resolved
from ._checks import int_array
from ._errors import InvalidArgumentError
from ._job_list import leave_rows, mark_done
from .sampler import PlannedIndex, PlannedSampler
from .store import MISS, NO_POSITION


# Filler's own attributes; any other is its CachedDataset's.
_FILLER_STATE = ("_cached", "_layout", "_slots", "_marks")
# How many samples the store holds first_sample tries to peek at before it
# starts a worker for the first one.
_PEEKS = 8
# How many ``.sampler`` attributes planned_sampler follows from a batch
# sampler (a BatchSampler over a wrapper over the PlannedSampler is 2).
_SAMPLER_DEPTH = 4


class Filler(torch.utils.data.Dataset):
    """What a worker does for a job (the module's docstring). Returns
    (batch number, rows written, {row: value} of values of another layout,
    rows loaded for the loader to store from the slot).

    It is the workers' dataset, so get_worker_info().dataset: it stands in
    for the CachedDataset there, as under torch's DataLoader. Its own state
    has private names; other attributes are the CachedDataset's, read and
    set through to it (get_worker_info().dataset.dataset is the user's
    dataset, where a worker_init_fn opens its per-worker handles)."""

    def __init__(self, dataset, layout, slots, marks=None):
        object.__setattr__(self, "_cached", dataset)
        object.__setattr__(self, "_layout", layout)
        object.__setattr__(self, "_slots", slots)
        object.__setattr__(self, "_marks", marks)  # JobList's (_job_list.py)

    def __getattr__(self, name):
        # Only names not found on the Filler itself. Dunders and its own
        # names are not passed on: unpickling (spawn workers) looks for
        # __setstate__ before _cached is set, which would recurse.
        if name in _FILLER_STATE or name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._cached, name)

    def __setattr__(self, name, value):
        if name in _FILLER_STATE:
            object.__setattr__(self, name, value)
        else:
            setattr(self._cached, name, value)

    def __delattr__(self, name):
        if name in _FILLER_STATE:
            object.__delattr__(self, name)
        else:
            delattr(self._cached, name)

    def __len__(self):
        return len(self._cached)

    def __getitem__(self, work):
        number, slot, carried, positions, indices, rows, store_now, serial = work
        words = self._marks.numpy() if self._marks is not None else None
        positions = np.asarray(positions, dtype=np.uint64)
        indices = np.asarray(indices, dtype=np.int64)
        try:
            if slot is None:  # drop_last's tail
                self._cached.load_batch(positions, indices)
                mark_done(words, serial)
                return number, [], {}, []
            leaves = carried if carried is not None else self._slots[slot]
            written, other, to_store = load_rows(self._cached, self._layout, leaves, positions,
                                                 indices, rows, defer_puts=True,
                                                 store_now=store_now)
        except BaseException:
            mark_done(words, serial)  # failed: nothing left, nothing to wait for
            raise
        if not to_store:
            mark_done(words, serial)
        elif not leave_rows(words, serial):  # the loop stopped: no loader stores them now
            kept = set(to_store)
            at = [k for k, row in enumerate(rows) if row in kept]  # to_store's order
            self._cached.store.put_rows(positions[at], indices[at], to_store, self._layout.meta,
                                        self._layout.payload_bytes, self._layout.offsets, leaves)
            to_store = []
        return number, written, other, to_store


def load_rows(ds, layout, leaves, positions, indices, rows, known=None, defer_puts=False,
              store_now=()):
    """Reads (positions[i], indices[i]) for rows[i], loading and storing the
    misses, applies the dataset's transform, and writes each value into row
    rows[i] of `leaves`. known: {i: value} already read. defer_puts (no
    transform): a loaded value written into `leaves` is not stored; its row
    is returned for the caller to store from there; except the rows of
    store_now, stored at once. Returns (rows written, {row: value} of values
    of another layout, rows to store)."""
    known = known or {}
    todo = [k for k in range(len(rows)) if k not in known]
    unstored = [] if defer_puts and ds.transform is None else None
    now = set(store_now)
    again = {int(indices[k]) for k in todo if int(rows[k]) in now}
    loaded = ds.load_batch(positions[todo], indices[todo], unstored, again) if todo else []
    values = dict(known)
    values.update(zip(todo, loaded))
    deferred = {todo[i] for i in unstored} if unstored else ()
    written, other, to_store = [], {}, []
    for k, row in enumerate(rows):
        value = values[k] if ds.transform is None else ds.transform(values[k])
        if layout.write_row(leaves, row, value):
            written.append(int(row))
            if k in deferred:
                to_store.append(int(row))
        else:
            if k in deferred:
                ds.store.put(int(positions[k]), int(indices[k]), value)
            other[int(row)] = resolved(value)
    return written, other, to_store


def draw_base_seed(loader, drawn):
    """Draws the base seed that torch's DataLoader draws at iter() (from
    loader.generator, else torch's global generator), before anything else
    of the epoch, so that the draws after it (shuffle's order, a
    transform's in this process, the training loop's own) come out as under
    torch's; with persistent workers once, as torch's one iterator draws
    it. Returns the generator's state before the draw (`drawn`, the first
    draw's, when none is drawn): worker_rng(state) draws that seed again,
    for the workers' DataLoader, whose iter() draws one."""
    if drawn is not None and loader.persistent_workers and loader.num_workers > 0:
        return drawn
    generator = loader.generator
    state = generator.get_state() if generator is not None else torch.get_rng_state()
    torch.empty((), dtype=torch.int64).random_(generator=generator)
    return state


def worker_rng(state):
    """A generator that draws what the one of draw_base_seed's `state` drew."""
    rng = torch.Generator()
    rng.set_state(state)
    return rng


def pass_tail(tail, store, rows=None):
    """Marks drop_last's `tail` (positions, indices; its `rows`, or all) as
    read: the store does not wait for positions that no one loads. Returns
    the tail still to pass: None once all of it is."""
    if tail is None:
        return None
    positions, indices = tail if rows is None else (tail[0][rows], tail[1][rows])
    store.mark_consumed(positions, indices)
    return None if rows is None else tail


def tail_misses(tail, store):
    """The rows of drop_last's `tail` that the store does not hold; its
    hits are passed now (nothing to load, nothing to wait for)."""
    if tail is None:
        return np.empty(0, np.int64)
    found = store.locate(tail[1]) != 0
    pass_tail(tail, store, np.flatnonzero(found))
    return np.flatnonzero(~found)


def end_workers(filler, job_list):
    """Joins the workers of `filler` (the workers' DataLoader), then frees
    the slots `job_list` holds: no worker writes into a slot once another
    batch may take it. Dropping the DataLoader is not enough: a worker's
    exception, re-raised through the loop, holds torch's iterator in a
    reference cycle, and its workers wrote on into the next epoch's batches.
    A loader's weakref.finalize runs it too, when a loader with persistent
    workers is dropped mid-epoch (its slots were kept busy for good)."""
    iterator = getattr(filler, "_iterator", None)  # kept: persistent_workers=True
    shutdown = getattr(iterator, "_shutdown_workers", None)  # torch's; idempotent
    if shutdown is not None:
        shutdown()
    job_list.release()


def first_sample(loader, plan):
    """The first sample of an epoch's `plan`, whose layout decides the batch
    tensors: (row 0's value, read here, or MISS when a job loads it with the
    other misses; a value of the epoch that shows the layout).

    With workers the Dataset is not called in this process, as under torch's
    DataLoader: a handle that a Dataset opens on first use (h5py, LMDB)
    would be opened here and inherited by forked workers. A first sample
    the store lacks is then shown by another sample of the epoch the store
    holds, read without counting an access (Store.peek), or else loaded in a
    worker process started for it alone (load_in_worker)."""
    ds = loader.dataset
    positions, indices = plan[0]
    position, index = int(positions[0]), int(indices[0])
    if loader.num_workers == 0 or ds.store.locate(indices[:1])[0] != 0:
        first = ds.store.get(position, index, default=MISS)
        if first is MISS:  # counted: loaded without a second read
            first = load_unread(loader, [position], [index])[0]
        return first, first
    every = np.concatenate([batch[1] for batch in plan])
    for held in every[np.flatnonzero(ds.store.locate(every) != 0)[:_PEEKS]].tolist():
        sample = ds.store.peek(held, default=MISS)
        if sample is not MISS:  # MISS: let go since located, or on a disk a reader cannot see
            return MISS, sample
    first = load_in_worker(loader, [position], [index], read=True)[0]
    return first, first


def unread_values(loader, positions, indices, rows, codes):
    """{row: untransformed value}, in row order, of the `rows` of a batch
    (positions, indices) that read_into did not read, by their `codes`: 1,
    the store let it go since it was found (the read is counted: it is
    loaded, load_unread); 2, a value of another layout, read again without a
    position (loaded too when it is gone meanwhile)."""
    ds = loader.dataset
    values, gone, where = {}, [], []
    for row, code in zip(rows, codes):
        values[row] = ds.store.get(NO_POSITION, int(indices[row]), default=MISS) \
            if code == 2 else MISS
        if values[row] is MISS:
            gone.append(row)
            where.append(int(positions[row]) if code == 1 else NO_POSITION)
    if gone:
        values.update(zip(gone, load_unread(loader, where, [int(indices[r]) for r in gone])))
    return values


def load_unread(loader, positions, indices):
    """Loads and stores (positions[i], indices[i]), whose reads were counted
    already (a miss), and returns the values: in this process without
    workers, else in a worker process of their own (load_in_worker)."""
    if loader.num_workers == 0:
        return [loader.dataset.load_miss(p, i) for p, i in zip(positions, indices)]
    return load_in_worker(loader, positions, indices, read=False)


def load_in_worker(loader, positions, indices, read):
    """The untransformed values of (positions[i], indices[i]), read from the
    store first if `read` (else their reads were counted already), the
    misses loaded and stored, in a worker process started for them alone,
    with the loader's worker settings (its worker_init_fn runs there, as
    worker 0 of 1). The worker's seed comes from a generator of its own: the
    loader's generator and torch's global one draw what they would without
    it."""
    once = torch.utils.data.DataLoader(
        SendBack(loader.dataset, None, ()), batch_sampler=[[(positions, indices, read)]],
        num_workers=1, collate_fn=one_job, timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, generator=torch.Generator())
    values, = list(once)
    return values


class SendBack(Filler):
    """The workers' dataset of load_in_worker (a Filler, so that it stands
    in for the CachedDataset there): a job (positions, indices, read) gives
    the values, read first if `read` (CachedDataset.load_batch), else loaded
    and stored (CachedDataset.load_miss)."""

    def __getitem__(self, job):
        positions, indices, read = job
        if read:
            values = self._cached.load_batch(np.asarray(positions, dtype=np.uint64),
                                             np.asarray(indices, dtype=np.int64))
        else:
            values = [self._cached.load_miss(p, i) for p, i in zip(positions, indices)]
        return [resolved(value) for value in values]


def one_job(batch):
    """collate_fn of the workers' DataLoaders: each of their batches is one job."""
    return batch[0]


def samplers_of(loader):
    """What opt4store.DataLoader `loader` draws from: its sampler (else its
    batch sampler), then each ``.sampler`` attribute down from it (torch's
    BatchSampler, its subclasses and most wrappers keep what they draw from
    there), _SAMPLER_DEPTH deep at most."""
    source = loader.sampler if loader.sampler is not None else loader.batch_sampler
    for _ in range(_SAMPLER_DEPTH):
        if source is None:
            return
        yield source
        source = getattr(source, "sampler", None)


def planned_sampler(loader):
    """The PlannedSampler that opt4store.DataLoader `loader` draws from
    (samplers_of), or None."""
    return next((s for s in samplers_of(loader) if isinstance(s, PlannedSampler)), None)


def epoch_plan(loader):
    """opt4store.DataLoader `loader`'s next epoch: (its batches as
    (positions, indices) arrays (an item each without auto-collation,
    batch_size=None); counts, where counts[k] is how many of the epoch's
    indices the PlannedSampler handed out once the loop has had k batches,
    the last the whole epoch (with drop_last, more than the batches hold);
    drop_last's tail as (positions, indices), or None; the PlannedSampler
    to tell the counts (note_yielded), or None; the rows of the largest
    batch)."""
    ds, sampler, batch_sampler = loader.dataset, loader.sampler, loader.batch_sampler
    planned = planned_sampler(loader)
    if batch_sampler is None or type(batch_sampler) is torch.utils.data.BatchSampler:
        drawn_from = sampler if batch_sampler is None else batch_sampler.sampler
        if planned is not None and planned is drawn_from:
            return _planned_batches(planned, batch_sampler)
    return _drawn_batches(ds, planned, sampler, batch_sampler)


def _planned_batches(planned, batch_sampler):
    """epoch_plan of torch's BatchSampler (or none) over PlannedSampler
    `planned`, cut from take_epoch()'s arrays: no index drawn one by one."""
    positions, indices = planned.take_epoch()
    size = batch_sampler.batch_size if batch_sampler is not None else 1
    drop_last = batch_sampler is not None and batch_sampler.drop_last
    count = len(indices) // size if drop_last else -(-len(indices) // size)
    tail = (positions[count * size:], indices[count * size:])
    counts = np.minimum(np.arange(count + 1) * size, len(indices))
    counts[-1] = len(indices)
    return [(positions[k * size:(k + 1) * size], indices[k * size:(k + 1) * size])
            for k in range(count)], counts, tail if len(tail[1]) else None, planned, size


def _drawn_batches(ds, planned, sampler, batch_sampler):
    """epoch_plan of any other batch sampler (or sampler, an item a batch),
    whose whole epoch is drawn now (the workers' jobs, the read-ahead and a
    loop that stops early use what lies ahead). A PlannedSampler drawn
    from, `planned` or else the CachedDataset's, is then at the epoch's end:
    after each batch the count it handed out is noted, and it is told none
    yet (note_yielded), so that its state_dict() says where the loop is,
    as under torch's DataLoader without workers. Not when it began no epoch
    here or more than one (the counts are not of one epoch): its own rules
    stand. A sampler that reports a length must keep to it: one that draws
    past it (an endless sampler) is refused, not drawn until memory runs
    out; one without a length is drawn to its end."""
    if planned is None and isinstance(ds.sampler, PlannedSampler):
        planned = ds.sampler
    began = planned.position() if planned is not None else None
    out, marks = [], []
    limit = _length(batch_sampler if batch_sampler is not None else sampler)
    for batch in batch_sampler if batch_sampler is not None else ([i] for i in sampler):
        if len(out) == limit:
            raise InvalidArgumentError(
                f"the sampler drew more than the {limit} batches its len() says in one epoch: "
                "opt4store.DataLoader draws an epoch whole when it starts, so its sampler must "
                "end (an endless one, as mmengine's InfiniteSampler, cannot drive it; give the "
                "CachedDataset's PlannedSampler, and iterate the loader once an epoch)")
        indices = int_array("indices", batch, np.int64, len(ds))  # no float, str or bool
        out.append((np.array([ds.position_of(i) for i in batch], dtype=np.uint64), indices))
        if planned is not None:
            at, count = planned.handed_out()
            marks.append(count if at == began else 0)  # 0: its epoch not begun yet
    rows = max((len(indices) for _, indices in out), default=0)
    if planned is None or planned.position() == began or planned.handed_out()[0] != began:
        counts = np.cumsum([0] + [len(indices) for _, indices in out])
        return out, counts, None, None, rows
    counts = ([0] + marks)[:len(out)] + [planned.handed_out()[1]]
    planned.note_yielded(0)
    return out, counts, None, planned, rows


def _length(sampler):
    """len(sampler), or None when it has no length."""
    try:
        return len(sampler)
    except TypeError:
        return None


def torch_loader(loader, plan, generator):
    """torch's DataLoader over opt4store.DataLoader `loader`'s CachedDataset,
    reading `plan`: the general path. Without auto-collation (batch_size=None),
    as torch's: an item a step, given to collate_fn as it is (by default
    default_convert: no leading dimension)."""
    kwargs = dict(num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                  pin_memory=loader.pin_memory, timeout=loader.timeout,
                  worker_init_fn=loader.worker_init_fn,
                  multiprocessing_context=loader.multiprocessing_context,
                  generator=generator, persistent_workers=loader.persistent_workers)
    if loader.prefetch_factor is not None:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if loader.batch_size is None and loader.batch_sampler is None:
        return torch.utils.data.DataLoader(loader.dataset, sampler=PlannedBatches(plan, True),
                                           batch_size=None, **kwargs)
    return torch.utils.data.DataLoader(loader.dataset, batch_sampler=PlannedBatches(plan),
                                       **kwargs)


class TorchLoaders:
    """The general path's torch DataLoader for each epoch (torch_loader).
    With persistent_workers, one for every epoch, as a torch DataLoader kept
    for the run: its workers (and worker_init_fn) start once. Its batch
    sampler (sampler without auto-collation) is a PlannedBatches whose plan
    is replaced each epoch; torch draws the indices in the main process, so
    its persistent workers read the new plan."""

    def __init__(self):
        self.kept = None

    def for_epoch(self, loader, plan, generator):
        """generator: the one torch's DataLoader draws its base seed from."""
        if not loader.persistent_workers:
            return torch_loader(loader, plan, generator)
        if self.kept is None:
            self.kept = torch_loader(loader, plan, generator)
        else:
            kept = self.kept
            planned = kept.batch_sampler if kept.batch_sampler is not None else kept.sampler
            planned.plan = plan
        return self.kept


class PlannedBatches:
    """An epoch's batches as lists of PlannedIndex: the batch sampler of
    torch's DataLoader when opt4store.DataLoader takes the general path;
    with `items`, the PlannedIndex of each one-item batch: its sampler."""

    def __init__(self, plan, items=False):
        self.plan, self.items = plan, items

    def __len__(self):
        return len(self.plan)

    def __iter__(self):
        for positions, indices in self.plan:
            batch = [planned_index(p, i) for p, i in zip(positions.tolist(), indices.tolist())]
            yield batch[0] if self.items else batch


def planned_index(position, index):
    value = PlannedIndex(index)
    value.position = position
    return value
