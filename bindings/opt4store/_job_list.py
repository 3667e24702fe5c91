"""The jobs opt4store.DataLoader hands its workers (JobList), and what
becomes of the jobs done ahead of a loop that stops early.

A worker loads a job's misses into the batch's shared slot and leaves
storing them to the loader, which stores them from the slot when it
assembles the batch (_loader_jobs.py says why). A loop that stops early
(a `break` at a step limit, a peek, Lightning's limit_train_batches)
never has those batches assembled: the workers' loads ahead of it, up to
num_workers x prefetch_factor batches, were lost and loaded again later.
Now each job has a serial number and a cell in a small shared array, the
marks: a worker marks a job done once its rows are in the slot, noting
whether it left rows for the loader to store. When the loop stops, the
loader writes the first serial it did not hand out into the marks' first
word (the abandoned line). A job below the line that a worker finishes
later stores its rows itself, from its slot; the loader receives the jobs
up to the last one done with rows for it, stores those rows, and leaves
the rest to the workers (with workers that do not persist, torch's
shutdown skips the jobs not begun: they were never loaded).

Neither side locks. A worker that leaves rows marks so before it reads
the line; the loader reads the marks after it draws the line; a memory
fence between each write and the read after it means that one of the two
sees the other's word: the worker stores its rows (and sends none back),
or the loader receives the job and stores them, or both happen to a job
the loader receives anyway (it then finds no rows to store). No job's
rows are lost, unless a job before them runs past _AHEAD_WAIT_S.
"""

import collections
import time

import numpy as np
import torch

from . import _core
from ._batch_layout import shared_tensor

# A mark: the job is out; done, with rows left for the loader to store;
# done with nothing left for it.
_SENT, _ROWS_LEFT, _NOTHING_LEFT = 0, 1, 2
# The longest a loop's end waits for jobs still running ahead of a job
# done with rows left (torch's own shutdown waits 5 s for a worker).
_AHEAD_WAIT_S = 5.0


def new_marks(jobs_ahead):
    """The marks (a shared int64 tensor) of a JobList whose workers'
    DataLoader keeps at most jobs_ahead jobs out: the abandoned line, then
    a ring of cells, one a job, twice that long (a cell is reused only
    once its job is long received or abandoned)."""
    marks = shared_tensor((1 + 2 * jobs_ahead + 2,), torch.int64)
    marks.zero_()
    return marks


def leave_rows(words, serial):
    """A worker's job `serial` is done with rows left for the loader to
    store (words: the marks as a numpy array, or None). False when the
    loop stopped before it received the job: the worker stores them."""
    if words is None:
        return True
    words[1 + serial % (len(words) - 1)] = _ROWS_LEFT
    _core.memory_fence()
    return serial >= int(words[0])


def mark_done(words, serial):
    """A worker's job `serial` is done, with no rows left for the loader."""
    if words is not None:
        words[1 + serial % (len(words) - 1)] = _NOTHING_LEFT


class JobList:
    """The batch sampler of the workers' DataLoader: the jobs of the batches
    that have rows for the workers, made when torch asks for them (so at
    most num_workers * prefetch_factor jobs ahead of the training loop).
    Each batch takes a slot when its first job is made and gives it back
    when the batch is assembled; its jobs write their rows there. drop_last's
    tail comes last, in jobs that take no slot. The loader receives the
    workers' results through next_result, in the order the jobs went out
    (torch's)."""

    def __init__(self, slots, marks, deferred=True):
        self.slots = slots
        self.marks = marks
        self.words = marks.numpy()  # the same memory, cheaper to index
        # The workers leave loads for the loader to store (no transform): the
        # rows read again are marked (read_again).
        self.deferred = deferred
        self.plan = []
        self.jobs = []
        self.parts = {}
        self.tail = None
        self.slot_for = {}
        self.again = None  # per batch: its rows read again later, or None
        self.serial = 0  # the next job's
        self.out = collections.deque()  # (serial, batch number): jobs not yet received
        self.stopped = False

    def set_epoch_jobs(self, plan, jobs, tail=False):
        """The epoch's batches, and {batch number: [rows]} for the workers;
        with `tail`, plan's last entry is drop_last's tail, whose jobs take
        no slot. Slots of an abandoned epoch's jobs are free again: torch's
        persistent workers finish those jobs before they take the new ones."""
        self.release()
        self.tail = len(plan) - 1 if tail else None
        self.plan = plan
        self.jobs = sorted(jobs.items())
        self.parts = {number: len(parts) for number, parts in self.jobs}
        self.again = read_again(plan) if jobs and self.deferred else None
        self.stopped = False

    def parts_of(self, number):
        return self.parts[number]

    def slot_of(self, number):
        return self.slot_for[number]

    def done(self, number):
        self.slots.give_back(self.slot_for.pop(number))

    def outstanding(self):
        return bool(self.slot_for)

    def release(self):
        for slot in self.slot_for.values():
            self.slots.give_back(slot)
        self.slot_for = {}
        self.again = None
        self.out.clear()  # torch's next iterator drops their results

    def next_result(self, results):
        """The next job's result from the workers' iterator `results` (its
        exception, raised, if the job failed)."""
        self.out.popleft()
        return next(results)

    def keep_work_ahead(self, results, store, layout):
        """The loop stopped: draws the abandoned line, then receives the
        jobs up to the last one done with rows for the loader and stores
        those rows (the module's docstring); hands out no more jobs. A job
        before it still running is waited for up to _AHEAD_WAIT_S in all
        (a stuck worker, the reason a user presses Ctrl-C, holds the loop's
        end no longer); a job that failed is passed over: the loop never
        asked for it, and torch's DataLoader would not raise its error."""
        self.stopped = True
        self.words[0] = self.serial
        _core.memory_fence()
        cells = self.words[1:]
        left = [k for k, (serial, _) in enumerate(self.out)
                if cells[serial % len(cells)] == _ROWS_LEFT]
        deadline = time.monotonic() + _AHEAD_WAIT_S
        for _ in range(left[-1] + 1 if left else 0):
            serial = self.out[0][0]
            while cells[serial % len(cells)] == _SENT:  # its result is not sent yet
                if time.monotonic() > deadline:
                    return
                time.sleep(0.001)
            try:
                number, _, _, loaded = self.next_result(results)
            except Exception:  # a failed job: a later one may have rows
                continue
            if loaded:
                positions, indices = self.plan[number]
                store.put_rows(positions[loaded], indices[loaded], loaded, layout.meta,
                               layout.payload_bytes, layout.offsets,
                               self.slots.tensors[self.slot_for[number]])

    def __len__(self):
        return sum(len(parts) for _, parts in self.jobs)

    def __iter__(self):
        for number, parts in self.jobs:
            if self.stopped:
                return
            if number == self.tail:
                slot = carried = None
            else:
                slot = self.slot_for[number] = self.slots.take()
                # A slot made after the workers started travels with the job.
                carried = self.slots.tensors[slot] if slot >= self.slots.known else None
            positions, indices = self.plan[number]
            again = self.again[number] if self.again is not None else None
            for rows in parts:
                if self.stopped:
                    return
                store_now = rows[again[rows]].tolist() if again is not None else []
                serial, self.serial = self.serial, self.serial + 1
                self.words[1 + serial % (len(self.words) - 1)] = _SENT
                self.out.append((serial, number))
                yield [(number, slot, carried, positions[rows].tolist(),
                        indices[rows].tolist(), rows.tolist(), store_now, serial)]


def read_again(plan):
    """Per batch of plan (positions, indices), a bool per row: whether a
    later row of the plan reads the same index."""
    indices = np.concatenate([batch[1] for batch in plan])
    flat = np.zeros(len(indices), dtype=bool)
    if len(indices) and np.bincount(indices).max() > 1:  # else (no repeats) no sort
        order = np.argsort(indices, kind="stable")  # equal indices in row order
        flat[order[:-1]] = indices[order[:-1]] == indices[order[1:]]
    bounds = np.cumsum([0] + [len(batch[1]) for batch in plan])
    return [flat[bounds[k]:bounds[k + 1]] for k in range(len(plan))]
