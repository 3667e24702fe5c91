"""opt4store.DataLoader: batches assembled natively from the store.

A drop-in for torch.utils.data.DataLoader over a CachedDataset: the same
keyword arguments with the same meaning, and the same batches (order,
nesting, dtypes, shapes, values, the last partial batch or none with
drop_last, len()). What differs is how a batch is made:

- Hits are read by the C++ store straight into the batch's tensors, one
  tensor per leaf of the sample (a (image, label) sample makes an image
  tensor and a label tensor), with the GIL released: no per-sample Python,
  no pickling, one copy from the store into the batch.
- Misses are loaded by the workers: only indices go to a worker; it loads
  the sample from the dataset, stores it, and writes its leaves into the
  batch's shared slot (a batch's misses are split across the workers); the
  main process reads the batch's hits into the same slot and yields the
  slot itself, no copy. A slot the training loop still holds is not written
  again (reference counts tell); past two held slots, rows are copied out
  instead. Workers never pickle a sample back. With num_workers=0 the main
  process loads them itself; with workers it never calls the Dataset, as
  torch's DataLoader does not (an epoch's first sample, which shows the
  layout, or rows let go since it began: a worker of their own,
  _loader_jobs.load_in_worker).
- A loop that stops before the epoch's end (break, an exception) marks the
  positions it never read: the store does not wait for them.
- drop_last's tail (the last partial batch, never yielded): its misses are
  loaded and stored by the workers behind the last batch, before the
  epoch's iterator ends, as the run without drop_last loads them, so that
  the next epochs find them cached; nothing of it is written into a batch
  or sent back. A loop that stops early loads none of it (unless the
  workers, num_workers * prefetch_factor jobs ahead, had taken it already).
- Workers start only for an epoch with misses (drop_last's tail too) or a
  transform: an epoch the store holds whole starts none.
- ``transform=`` of the CachedDataset runs on every read, after the cache:
  in the workers (their outputs go into the slots; keep one loader with
  persistent_workers=True, or each new loader starts them), or in the main
  process without workers.

The fast path needs samples that default_collate would stack: tensors,
numpy arrays, Python ints, floats and bools, in tuples, lists, dicts and
namedtuples (strings ride along), with the same dtypes and shapes in every
sample. A batch that does not fit (a sample of another shape) is assembled
the general way: values decoded in Python and collated. A custom
``collate_fn`` (or ``batch_size=None``) always takes the general path,
which is torch's DataLoader over the CachedDataset (its ``__getitems__``
reads a batch with one call into the store; batch_size=None, as torch's,
gives each item alone, default_convert'ed: no auto-collation; one kept
for every epoch with persistent_workers=True): correct, and slower.

Assumptions, named: the loader's sampler is the CachedDataset's
PlannedSampler (its plan drives the store), or a sampler whose reads are
then unplanned; a batch_sampler= is iterated for the whole epoch at its
start (the jobs and read-ahead use the plan), so it must end (drawing past
its len() is refused); a batch's memory is written again only once no
tensor or view of it is left, so keeping a batch is safe (it costs a new
buffer); one epoch's iteration at a time: iter() ends the one before (as
torch's DataLoader with persistent workers resets its one iterator).
"""

import functools
import time
import weakref

import numpy as np
import torch
import torch.utils.data

from . import _batch_layout
from ._checks import check_int
from ._errors import InvalidArgumentError
from ._job_list import JobList, new_marks
from ._loader_args import checked_arguments
from ._loader_jobs import (Filler, TorchLoaders, draw_base_seed, end_workers,
                           epoch_plan, first_sample, load_rows, one_job, pass_tail,
                           planned_sampler, samplers_of, tail_misses, unread_values, worker_rng)
from ._read_ahead import ReadAhead
from .device import OwnBatches, check_device, to_device
from .store import MISS

_default_collate = _batch_layout.default_collate

# Lent slots the training loop may hold before batches are copied out of
# them (the loop variable's batch, and one kept for a step).
_LENT_SLOTS = 2
# Read ahead only while the loop spends this long with a batch: else the
# read overlaps nothing and its thread costs more (README, "read-ahead").
_READ_AHEAD_MIN_STEP_S = 200e-6
# drop_last's tail goes to the workers in jobs of at least this many rows.
_MIN_JOB_ROWS = 4
# How long an epoch's start waits for the owner to take the values the last
# epoch's workers put; past it, the epoch loads what it cannot see.
_PUTS_WAIT_S = 2.0


# ---------------------------------------------------------------- the loader


class DataLoader:
    """A drop-in for torch.utils.data.DataLoader over an opt4store
    CachedDataset (see this module's docstring): change only the class
    name. Takes torch's keyword arguments with their meaning, plus
    ``device=``: batches copied there ahead of use, from pinned slots on a
    side stream (as opt4store.to_device does), for every epoch.

    ``state_dict()`` / ``load_state_dict()`` (torchdata's StatefulDataLoader
    convention) resume at exactly the first batch not yet yielded, with any
    number of workers (with ``device=`` or to_device(loader): not yet handed
    to the loop, whatever was copied ahead); ``set_epoch(e)`` goes to the sampler.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 device=None):
        (batch_size, shuffle, sampler, num_workers, timeout, prefetch_factor, pin_memory,
         drop_last, persistent_workers, multiprocessing_context) = checked_arguments(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
            pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
            prefetch_factor, persistent_workers, pin_memory_device)
        self.dataset = dataset
        self.batch_size = batch_size if batch_sampler is None else None
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if batch_sampler is None and batch_size is not None:
            self.batch_sampler = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self._pin = pin_memory and torch.cuda.is_available()  # batches in pinned memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device
        self.device = None if device is None else check_device("device", device)
        # One DeviceLoader for every epoch: its pinned slots are kept. (A
        # DeviceLoader, this one or to_device(loader)'s, iterates
        # _own_batches, so that a batch counts once handed to the loop.)
        self._own_batches = OwnBatches(self._batches)
        self._on_device = None if device is None else to_device(self._own_batches, self.device)
        self._layout = None
        self._filler = None       # the workers' DataLoader, kept with persistent_workers
        self._torch_loaders = TorchLoaders()  # the general path's, likewise
        self._slots = None        # per job in flight: shared tensors, one per leaf
        self._job_list = None
        self._end = None          # end_workers for them (a weakref.finalize)
        self._running = lambda: None  # the epoch's batches (a weak reference)
        self._seed_state = None   # its generator's before the base seed (draw_base_seed)
        self._counts = None       # the epoch in progress's counts (epoch_plan)
        self._planned = None      # the PlannedSampler told them, or None
        self._rows = None         # its largest batch's rows
        self._yielded = 0         # its batches yielded
        self._to_hand = None      # its batches' counts, queued for a DeviceLoader to make
        self._tail = None         # drop_last's tail not yet loaded or passed
        self._every = {}          # batch size -> np.arange(batch size)

    def __len__(self):
        if self.batch_sampler is None:
            return len(self.sampler)
        return len(self.batch_sampler)

    def set_epoch(self, epoch):
        """Passes `epoch` to the first sampler drawn from that has a set_epoch
        (a DistributedSampler: sampler=, or in a batch_sampler=), if any."""
        epoch = check_int("epoch", epoch)  # also where no sampler has a set_epoch
        for source in samplers_of(self):
            if hasattr(source, "set_epoch"):
                source.set_epoch(epoch)
                return

    # ---- resume

    def state_dict(self):
        """Where to resume: the PlannedSampler's state at the first batch not
        yet yielded (the loader tells the sampler what it has yielded, so no
        consumed= is needed, whatever the workers fetched ahead). The
        sampler: the loader's, its batch sampler's ``.sampler``, or the one
        the last epoch drew from."""
        sampler = self._resumed()
        if sampler is None:
            raise InvalidArgumentError(
                "state_dict() needs the CachedDataset's PlannedSampler as the loader's sampler "
                "(or as its batch sampler's .sampler)")
        return {"sampler": sampler.state_dict()}

    def load_state_dict(self, state):
        """The next iteration resumes at the first batch `state` had not yielded."""
        sampler = self._resumed()
        if sampler is None or not isinstance(state, dict):
            raise InvalidArgumentError("load_state_dict() needs a PlannedSampler and a state dict")
        if "sampler" not in state:
            raise InvalidArgumentError(
                "load_state_dict: expected what loader.state_dict() returns, {'sampler': ...}; "
                f"got keys {sorted(state)} (a PlannedSampler's state goes to its own method)")
        sampler.load_state_dict(state["sampler"])  # checks it

    def _resumed(self):
        found = planned_sampler(self)
        return found if found is not None else self._planned

    # ---- iteration

    def __iter__(self):
        return self._batches() if self._on_device is None else self._device_batches()

    def _device_batches(self):
        # Holds the loader (OwnBatches holds it weakly) while its batches go.
        yield from self._on_device

    def _general(self):
        return self.collate_fn is not None or self.batch_size is None and \
            self.batch_sampler is None

    def _batches(self, to_hand=None):
        """An epoch's batches. to_hand: a deque that receives, per batch, the
        call that counts it as yielded, for a DeviceLoader that loads ahead
        to make when the loop gets the batch (OwnBatches.handed). One epoch
        at a time (its state and workers are the loader's): a new one ends
        the one before (a peeked `it = iter(loader)` kept while a loop runs)."""
        before, batches = self._running(), self._epoch_batches(to_hand)
        self._running = weakref.ref(batches)
        try:
            if before is not None:
                before.close()  # its finally ends its epoch now, not during this one
        except ValueError:  # running on a DeviceLoader's thread: it ends as before
            pass
        return batches

    def _epoch_batches(self, to_hand):
        self._seed_state = draw_base_seed(self, self._seed_state)
        plan, self._counts, self._tail, self._planned, self._rows = epoch_plan(self)
        self._yielded = 0
        self._to_hand = to_hand
        try:
            yield from self._epoch(plan)
        finally:
            # A loop that stopped early never reads the rest of the epoch
            # (nor is drop_last's tail loaded then): the store must not wait
            # for those positions (unless the loop closed it).
            if self.dataset.store.is_open:
                self._tail = pass_tail(self._tail, self.dataset.store)
                for positions, indices in plan[self._yielded:]:
                    self.dataset.store.mark_consumed(positions, indices)

    def _load_tail(self, rows, filler):
        """Loads drop_last's tail misses into the store (the workers' jobs
        behind the last batch, or this process's loads), as the run without
        drop_last does when it reads its last partial batch."""
        if len(rows) and filler is not None:
            number = self._job_list.tail
            for _ in range(self._job_list.parts_of(number)):
                got = self._job_list.next_result(filler)[0]
                assert got == number, (got, number)
        elif len(rows):
            positions, indices = self._tail
            self.dataset.load_batch(positions[rows], indices[rows])
        self._tail = None

    def _epoch(self, plan):
        if self._general():
            # torch's DataLoader reads whole batches only
            self._tail = pass_tail(self._tail, self.dataset.store)
            for number, batch in enumerate(self._torch_loaders.for_epoch(
                    self, plan, worker_rng(self._seed_state))):
                self._count_yielded(number + 1)
                yield batch
            return
        if not plan:
            self._tail = pass_tail(self._tail, self.dataset.store)
            self._count_yielded(0)
            return
        ds = self.dataset
        # A sample shows the layout of the epoch's samples (after the
        # transform: a probe whose random draws are undone, so that every
        # read's transform draws what it would under torch's DataLoader).
        first, sample = first_sample(self, plan)
        try:
            layout = _batch_layout.layout_of(sample if ds.transform is None else
                                             _batch_layout.probe(ds.transform, sample))
        except _batch_layout.NoLayout:
            layout = None
        if layout is None:
            self._tail = pass_tail(self._tail, self.dataset.store)
            yield from self._general_epoch(plan, first)
            return
        if self._layout is None or self._layout.meta != layout.meta:
            self._stop_workers()
            self._layout = layout
        jobs = self._jobs(plan, first is not MISS)
        tail = tail_misses(self._tail, self.dataset.store)
        read_into = ds.store.batch_reader()
        # Workers start for the tail alone too: this process does not load.
        workers = self.num_workers > 0 and (bool(jobs) or len(tail) > 0)
        filler = self._start_workers(plan, jobs, tail) if workers else None
        read_async = ds.store.batch_reader_async() if filler is None and len(plan) > 1 else None
        ahead = ReadAhead(ds.store) if read_async is not None else None
        step = None  # the loop's time with the last batch
        try:
            for number, (positions, indices) in enumerate(plan):
                batch = self._assemble(number, positions, indices, self._layout, jobs, filler,
                                       first if number == 0 else MISS, read_into,
                                       ahead.take(number) if ahead is not None else None)
                if ahead is not None and number + 1 < len(plan) and number + 1 not in jobs \
                        and step is not None and step >= _READ_AHEAD_MIN_STEP_S:
                    self._read_ahead(ahead, number + 1, plan[number + 1], read_async)
                self._count_yielded(number + 1)
                handed = time.perf_counter()
                yield batch
                step = time.perf_counter() - handed
            self._load_tail(tail, filler)
        except GeneratorExit:  # the loop stopped early: keep what the workers loaded ahead
            if filler is not None and ds.store.is_open:
                self._job_list.keep_work_ahead(filler, ds.store, self._layout)
            raise
        finally:
            if ahead is not None:
                ahead.close()
            if filler is not None and not self.persistent_workers:
                self._stop_workers(keep_slots=True)

    def _count_yielded(self, batches):
        """Tells the PlannedSampler how far the loop got once it has had
        `batches` of the epoch's batches (epoch_plan's counts: after the
        last, the whole epoch, drop_last's tail included, so that a
        state_dict taken then resumes at the next epoch). With to_hand, the
        count waits there until the batch reaches the loop (no batch: now)."""
        self._yielded = batches
        if self._planned is not None:
            note = functools.partial(self._planned.note_yielded, int(self._counts[batches]))
            if self._to_hand is None or not batches:
                note()
            else:
                self._to_hand.append(note)

    def _jobs(self, plan, first_read):
        """{batch number: [rows]}: the rows the workers (or, without workers,
        this process) load, in one or more jobs per batch: the misses, or
        every row when a transform must run on each read. One locate for the
        whole epoch (a call per batch cost more than the answer)."""
        ds = self.dataset
        sizes = [len(indices) for _, indices in plan]
        if ds.transform is not None:
            return {number: np.array_split(np.arange(size), self._parts())
                    for number, size in enumerate(sizes) if size}
        # Epoch-wide row numbers of the misses, but the first sample if read.
        if self.num_workers > 0:  # values still on the queue would start workers for nothing
            ds.store.wait_for_puts(_PUTS_WAIT_S)
        missing = np.flatnonzero(ds.store.locate(np.concatenate([b[1] for b in plan])) == 0)
        if first_read:
            missing = missing[missing != 0]
        if not len(missing):
            return {}
        starts = np.cumsum([0] + sizes)
        bounds = np.searchsorted(missing, starts)
        jobs = {}
        for number in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
            rows = missing[bounds[number]:bounds[number + 1]] - starts[number]
            jobs[number] = np.array_split(rows, self._parts())
        return jobs

    def _parts(self):
        """How many jobs a batch's misses make: one a worker (a job may have
        no rows), so that a batch is ready sooner, no worker idles at the
        epoch's end while another loads the last batch alone, and the jobs
        ahead (prefetch_factor x num_workers of them, _start_workers) span
        as many batches, and slots, as torch keeps ahead. With a transform,
        one job per batch: batch k runs in worker k % num_workers, drawing
        random numbers as it would under torch's DataLoader."""
        if self.dataset.transform is not None or self.num_workers < 2:
            return 1
        return self.num_workers

    def _start_workers(self, plan, jobs, tail):
        """The workers' iterator over the jobs, in batch order, then
        drop_last's tail misses (rows of self._tail) in jobs of their own."""
        depth = self.num_workers * (self.prefetch_factor or 2)
        if self._filler is not None and self._slots.rows < self._rows:
            self._stop_workers()  # a batch sampler's larger batches: new slots, new workers
        if self._filler is None:
            count = depth + 2 + _LENT_SLOTS
            if self._slots is None or self._slots.known != count or \
                    self._slots.rows < self._rows:
                self._slots = _batch_layout.shared_slots(self._layout, self._rows, count)
            self._job_list = JobList(self._slots, new_marks(depth * self._parts()),
                                     deferred=self.dataset.transform is None)
            kwargs = dict(num_workers=self.num_workers, collate_fn=one_job, timeout=self.timeout,
                          worker_init_fn=self.worker_init_fn,
                          multiprocessing_context=self.multiprocessing_context,
                          generator=worker_rng(self._seed_state), persistent_workers=True)
            # Jobs ahead: prefetch_factor batches a worker, as torch, each
            # batch in _parts() jobs. A worker that ends its part of a batch
            # early has the next batch's parts to do instead of waiting for
            # the slower part.
            kwargs["prefetch_factor"] = (self.prefetch_factor or 2) * self._parts()
            self._filler = torch.utils.data.DataLoader(
                Filler(self.dataset, self._layout, self._slots.tensors[:self._slots.known],
                       self._job_list.marks),
                batch_sampler=self._job_list, **kwargs)
            self._end = weakref.finalize(self, end_workers, self._filler, self._job_list)
            self._end.atexit = False  # torch ends its workers at exit
        if len(tail):
            jobs = dict(jobs)
            jobs[len(plan)] = np.array_split(tail, max(1, min(self.num_workers,
                                                              len(tail) // _MIN_JOB_ROWS)))
            plan = plan + [self._tail]
        self._job_list.set_epoch_jobs(plan, jobs, tail=len(tail) > 0)
        return iter(self._filler)

    def _stop_workers(self, keep_slots=False):
        """Ends the workers, then frees their jobs' slots (end_workers, once);
        the slots stay for the next epoch's workers unless the layout changed.
        (Joining on a thread of its own was tried: the exiting workers then
        slowed the next epoch more than the join cost this one.)"""
        end, self._end = self._end, None
        self._filler = self._job_list = None
        if not keep_slots:
            self._slots = None
        if end is not None:
            end()

    def _receive(self, number, filler):
        """The workers' results for batch `number`: (rows written, {row:
        value} of another layout, rows loaded for this process to store from
        the slot, its slot)."""
        written, other, to_store = [], {}, []
        for _ in range(self._job_list.parts_of(number)):
            got, rows, theirs, loaded = self._job_list.next_result(filler)
            assert got == number, (got, number)
            written.extend(rows)
            other.update(theirs)
            to_store.extend(loaded)
        return sorted(written), other, to_store, self._job_list.slot_of(number)

    def _assemble(self, number, positions, indices, layout, jobs, filler, first, read_into,
                  ahead=None):
        """Batch `number`; ahead: (leaves, codes) of its read by ReadAhead."""
        ds = self.dataset
        rows = len(indices)
        if ahead is not None:
            leaves, codes = ahead
            return self._finish(positions, indices, layout, leaves, self._every_row(rows), codes,
                                {})
        pin = self._pin
        parts = jobs.get(number)
        loaded = np.concatenate(parts) if parts else None
        other = {}
        if loaded is not None and filler is not None:
            written, theirs, to_store, slot = self._receive(number, filler)
            other.update(theirs)
            if to_store:  # before the slot is lent: the loop may write into it
                ds.store.put_rows(positions[to_store], indices[to_store], to_store, layout.meta,
                                  layout.payload_bytes, layout.offsets, self._slots.tensors[slot])
            # The slot becomes the batch (no copy) unless the loop holds
            # enough lent slots already; then its rows are copied out.
            if not pin and self._slots.held_count() < _LENT_SLOTS:
                leaves = self._slots.lend(slot, rows)
            else:
                leaves = layout.empty(rows, pin)
                for leaf, src in zip(leaves, self._slots.tensors[slot]):
                    _batch_layout.copy_rows(leaf, written, src)
            self._job_list.done(number)
        else:
            leaves = self._free_leaves(layout, rows, filler, pin)
        first_read = first is not MISS and ds.transform is None
        if first_read and not layout.write_row(leaves, 0, first):
            other[0] = first
        if loaded is not None and filler is None:
            known = {0: first} if first is not MISS and ds.transform is not None else None
            _, theirs, _ = load_rows(ds, layout, leaves, positions[loaded], indices[loaded], loaded,
                                   known=known)
            other.update(theirs)
        if loaded is None and not first_read:
            # Every row is a hit (as far as locate told): one read, no index.
            todo = self._every_row(rows)
            codes = read_into(positions, indices, todo, layout.meta, layout.payload_bytes,
                              layout.offsets, leaves)
        else:
            done = np.zeros(rows, dtype=bool)
            if loaded is not None:
                done[loaded] = True
            done[0] |= first_read
            todo = np.flatnonzero(~done)
            codes = read_into(positions[todo], indices[todo], todo, layout.meta,
                              layout.payload_bytes, layout.offsets, leaves) if len(todo) else ()
        return self._finish(positions, indices, layout, leaves, todo, codes, other)

    def _finish(self, positions, indices, layout, leaves, todo, codes, other):
        """The batch in `leaves`, once the rows read_into did not read (codes
        per row of `todo`) are read another way."""
        ds = self.dataset
        unread = np.flatnonzero(codes)
        for row, value in unread_values(self, positions, indices, todo[unread].tolist(),
                                        [codes[k] for k in unread]).items():
            if ds.transform is not None:
                value = ds.transform(value)
            if not layout.write_row(leaves, row, value):
                other[row] = value
        if other:
            return self._collate_rows(leaves, layout, other, positions, indices)
        return layout.nest(leaves)

    def _read_ahead(self, ahead, number, batch, read_async):
        """Starts the read of batch `number`, all hits as located, in the
        read-ahead thread, into tensors taken here."""
        (positions, indices), layout = batch, self._layout
        rows = len(indices)
        leaves = self._free_leaves(layout, rows, None, self._pin)
        ahead.start(number, leaves, read_async, positions, indices, self._every_row(rows),
                    layout.meta, layout.payload_bytes, layout.offsets, leaves)

    def _every_row(self, rows):
        """np.arange(rows), made once per batch size (read_into only reads it)."""
        if rows not in self._every:
            self._every[rows] = np.arange(rows)
        return self._every[rows]

    def _free_leaves(self, layout, rows, filler, pin):
        """Tensors for a batch no job fills: with no workers running, a free
        shared slot (paged in already) rather than a page-faulting new one."""
        leaves = None
        if filler is None and not pin:
            slots = self._slots if self._slots is not None else \
                _batch_layout.slots_for(layout, self._rows)
            if slots is not None and slots.layout.meta == layout.meta and slots.rows >= rows:
                leaves = slots.borrow(rows)
        return leaves if leaves is not None else layout.empty(rows, pin)

    def _collate_rows(self, leaves, layout, other, positions, indices):
        """A batch with rows of another layout: every row as a value, collated."""
        return _default_collate([other[row] if row in other else layout.row_value(leaves, row)
                                 for row in range(len(indices))])

    def _general_epoch(self, plan, first):
        """An epoch whose first sample the fast path cannot assemble: with
        workers, torch's DataLoader over the CachedDataset (first: unused);
        without, values read a batch at a time, transformed and collated."""
        ds = self.dataset
        if self.num_workers > 0:
            for number, batch in enumerate(self._torch_loaders.for_epoch(
                    self, plan, worker_rng(self._seed_state))):
                self._count_yielded(number + 1)
                yield batch
            return
        for number, (positions, indices) in enumerate(plan):
            if number == 0:
                values = [first] + ds.load_batch(positions[1:], indices[1:])
            else:
                values = ds.load_batch(positions, indices)
            if ds.transform is not None:
                values = [ds.transform(v) for v in values]
            self._count_yielded(number + 1)
            yield _default_collate(values)
