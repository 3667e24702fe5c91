"""to_device: batches copied to the GPU ahead of the step that uses them.

On CUDA, a DeviceLoader copies every CPU tensor of a batch into a pinned
host buffer, one of max(depth, 1) + 1 slots reused round-robin, and issues
the host-to-device copies with non_blocking on a side stream. It stages
each batch before the caller asks for it, in one of two places, chosen
batch by batch (the pace rule):

- in the caller's thread: its next() takes the following batch from the
  loader and stages it before it returns the current one, so the transfer
  overlaps the caller's step, and loading adds to the caller's time;
- on a background thread, up to ``depth`` batches ahead: loading, the
  pinned copy and the transfer overlap the caller's step, but the thread's
  Python work takes the GIL from it. A step bound by its kernel launches (a
  small model at a small batch on a fast GPU) retakes the GIL at every
  launch and pays for that work and the handoffs (the CPU stand-in
  bench/launch_bench.py, and the paired rounds of bench/gpu_bench.py on an
  H200: cached epochs came closer to the step's floor with no thread).

The pace rule: loading is measured in CPU seconds of the thread that does
it (time.thread_time over the loader's next() and the staging: its work,
not its waits for worker processes or the GIL), the step in wall seconds
between the caller's next() calls, each the median of the last 4
batches (_PACE_WINDOW). Loading moves to the thread when it costs more than
an eighth of the step and more than 1 ms (a decode with num_workers=0, an
epoch of misses), and back to the caller's thread when it falls under half
of that (cached epochs, batches that worker processes made). So an epoch
that decodes runs its decoding beside the step, and a cached epoch pays
only its small loading in the caller's thread, with no thread to take the
GIL. The choice and the windows are kept across epochs of one
DeviceLoader; ``batches_on_thread`` counts the batches the thread staged.
depth=0: always in the caller's thread. pace=False: always on the thread.

The rule's share assumes a step whose host thread is busy, as a
launch-bound one is. A step that mostly waits for its GPU (a large batch,
a sync such as loss.item() in every step) loses little to a thread's GIL
work, while loading in its thread leaves the GPU idle for that time, up
to an eighth of the step by the rule; and a step busier than the rule
assumes can lose more to the thread than its loading costs. So, where
loading costs between 1/32 and half of the step (and over 1 ms), the pace
tries the other place now and then (a trial): the wall time from one
batch to the next, the median over 4 batches in each place once the
handover is past, decides, and the place tried is kept when it was 3%
faster; else the place goes back to what chose the one before the trial
(an earlier trial, or the rule as it stands at the trial's end: loading
may have changed meanwhile, as from an epoch that decoded to one of hits).
The first trial comes once 4 batches were timed in one place; the
next 32 batches after a trial that changed the place, twice as many after
one that did not (up to 1024). A trial lasts until the place tried has 4
such batches, at most 12 batches, so the slower place costs that, ever
more rarely. What a trial chose holds until the next trial, or until the
load's median leaves half to twice what it was then (another kind of
loading: the rule again). ``trials`` counts them. pace=False puts every
batch on the thread, with no trial.

Ordering: a slot is refilled only after the copy out of it has completed
(the stager waits on the CUDA event recorded after that copy), and one
thread at a time stages (the background thread is stopped and joined, its
staged batches kept in order, before the caller's thread stages again).
The caller's current stream waits on a batch's event before the batch is
yielded, and each device tensor is tied to that stream (record_stream), so
its memory is not reused while the caller's kernels read it.

Memory: pinned host memory of (max(depth, 1) + 1) x the largest batch,
allocated on the first batch and kept across epochs (a leaf's buffer is
reallocated when a tensor needs more bytes or another dtype; a smaller one,
such as a last partial batch, uses a prefix of it); device memory for up to
depth + 3 batches (queued, being copied, and the caller's last two).

Threads: iterate a DeviceLoader from one thread at a time, as a DataLoader
(two iterations alive at once each get their own slots). The loader's
iterator is created in the caller's thread and advanced in it or in the
background thread, one at a time, which a DataLoader allows. An exception
raised by the loader is raised in the caller in place of the batch that
failed, after the batches before it. Leaving the loop early (break, an
exception) stops the background thread and waits for it, which takes at
most the time to load the batch it is on.

Resume: an opt4store.DataLoader's batch counts for its state_dict() once
handed to the caller, not when staged (OwnBatches.handed): a checkpoint
taken in the loop's body resumes at the next batch the loop has not seen.

On the CPU, to_device returns the loader itself. Batches keep their
containers (tuple, list, dict, namedtuple); other values pass as they are.
"""

import atexit
import collections
import itertools
import queue
import statistics
import threading
import time
import weakref

import torch

from ._checks import check_bool, check_int
from ._errors import InvalidArgumentError, InvalidTypeError

# The most batches DeviceLoader copies ahead: each holds a pinned buffer.
_MAX_DEPTH = 1 << 10
# The pace rule (module docstring): the batches whose medians decide, the
# steps timed before the first decision, the share of the step above which
# loading goes to the thread (back in the caller's thread under half of
# it), and the load under which a thread never pays for its handoffs.
_PACE_WINDOW = 4
_PACE_MIN_STEPS = 2
_THREAD_STEP_SHARE = 1 / 8
_THREAD_MIN_LOAD_S = 1e-3
# Its trials (module docstring): the shares of the step between which
# loading is worth a trial of the other place, the most batches a trial
# lasts, how much faster the place on trial must be, and the batches between
# trials (doubling while the place stays, up to the most).
_TRIAL_STEP_SHARE = 1 / 32
_TRIAL_MAX_SHARE = 1 / 2
_TRIAL_MAX_BATCHES = 3 * _PACE_WINDOW
_TRIAL_MARGIN = 0.03
_TRIAL_FIRST_INTERVAL = 32
_TRIAL_MAX_INTERVAL = 1024


def check_device(name, device):
    """``device`` (a str such as "cuda:0", an int CUDA index or a
    torch.device) as a torch.device, or an opt4store error naming ``name``."""
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise InvalidTypeError(f"{name}: expected a torch.device, a str or an int, got "
                               f"{type(device).__name__} {device!r}")
    try:
        return torch.device(device)
    except (RuntimeError, ValueError, TypeError) as e:
        raise InvalidArgumentError(f"{name}: {device!r} is not a device ({e})") from None


def _apply(batch, fn):
    """batch with fn applied to each tensor in it, in a fixed order, and each
    container rebuilt with its own type."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_apply(b, fn) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_apply(b, fn) for b in batch)
    if isinstance(batch, dict):
        items = {k: _apply(v, fn) for k, v in batch.items()}
        try:
            return type(batch)(items)
        except TypeError:  # a dict subclass that a dict cannot build (defaultdict)
            return items
    return batch


class _Failed:
    def __init__(self, error):
        self.error = error


_END = object()
_running = {}  # thread -> its stop event, for every background thread alive


@atexit.register
def _stop_running():
    """Stops the threads of iterations never closed (a loop left early whose
    generator is still referenced) before the interpreter finalizes: a daemon
    thread caught inside torch's C++ code then aborts the process."""
    for thread, stop in list(_running.items()):
        stop.set()
        thread.join(timeout=10)


class _Pace:
    """Where a DeviceLoader stages its next batches: in the caller's thread
    or on a background thread (the pace rule and its trials, in the
    module's docstring). Fed from the caller's thread only: the background
    thread hands its loads over with the batches. rule=False: always the
    thread."""

    def __init__(self, rule=True):
        self.rule = rule
        self.loads = collections.deque(maxlen=_PACE_WINDOW)  # CPU s loading a batch
        self.steps = collections.deque(maxlen=_PACE_WINDOW)  # wall s between next() calls
        # Wall s from one batch handed over to the next, per place (True:
        # the thread), since the loop last came to that place.
        self.periods = {False: collections.deque(maxlen=_PACE_WINDOW),
                        True: collections.deque(maxlen=_PACE_WINDOW)}
        self.on_thread = not rule
        self.by_rule = False  # the rule's own choice, with its hysteresis
        self.batches = 0
        self.batches_on_thread = 0  # staged on the background thread, since creation
        self.trials = 0
        # (place on trial, place before it, batch count that ends it, whether
        # the place before it was a trial's choice)
        self._trial = None
        self._override = None  # (place, median load): a trial's choice against the rule
        self._interval = _TRIAL_FIRST_INTERVAL
        self._next_trial = 0
        self._last_how = None

    def begin(self):
        """A new iteration: its first period follows no handover."""
        self._last_how = None

    def note_load(self, load, on_thread):
        """A batch handed over: its load's CPU seconds, and where it was staged."""
        self.loads.append(load)
        self.batches += 1
        self.batches_on_thread += on_thread

    def note_period(self, how, seconds):
        """The wall seconds since the batch before was handed over, and how
        this one came: "thread" (from the thread's queue), "here" (the loop
        staged the following batch in the meantime) or None (both, or
        neither: a handover). Counted when the batch before came the same way."""
        if how is not None and how == self._last_how:
            self.periods[how == "thread"].append(seconds)
        self._last_how = how

    def choose(self):
        """Whether the following batches are staged on a background thread."""
        if not self.rule or len(self.steps) < _PACE_MIN_STEPS:
            return self.on_thread
        load, step = statistics.median(self.loads), statistics.median(self.steps)
        limit = max(_THREAD_MIN_LOAD_S, step * _THREAD_STEP_SHARE)
        self.by_rule = load > (limit / 2 if self.by_rule else limit)
        if self._trial is not None:
            if len(self.periods[self._trial[0]]) < _PACE_WINDOW and self.batches < self._trial[2]:
                return self.on_thread
            self._end_trial(load)
        elif self._override is not None and not (0.5 * self._override[1] <= load <=
                                                 2 * self._override[1]):
            self._override = None  # another kind of loading: the rule, until a trial
            self._interval = _TRIAL_FIRST_INTERVAL
            self._next_trial = self.batches + _PACE_WINDOW
        chosen = self.by_rule if self._override is None else self._override[0]
        if (self._trial is None and self.batches >= self._next_trial and
                max(_THREAD_MIN_LOAD_S, step * _TRIAL_STEP_SHARE) < load < step * _TRIAL_MAX_SHARE
                and chosen == self.on_thread and len(self.periods[chosen]) == _PACE_WINDOW):
            self._trial = (not chosen, chosen, self.batches + _TRIAL_MAX_BATCHES,
                           self._override is not None)
            self.trials += 1
            chosen = not chosen
        if chosen != self.on_thread:
            self.periods[chosen].clear()
        self.on_thread = chosen
        return chosen

    def _end_trial(self, load):
        """Keeps the place on trial if its periods' median beat the place
        before it by _TRIAL_MARGIN, else goes back to what chose the place
        before it: an earlier trial, or the rule as it now stands (loading
        may have changed during the trial: an epoch of hits after one that
        decoded). The next trial comes twice as late when the place stays
        the same."""
        tried, before, _, before_by_trial = self._trial
        self._trial = None
        won = (len(self.periods[tried]) == _PACE_WINDOW and statistics.median(self.periods[tried])
               < statistics.median(self.periods[before]) * (1 - _TRIAL_MARGIN))
        kept = tried if won else before if before_by_trial else self.by_rule
        self._override = (kept, load) if kept != self.by_rule else None
        self._interval = (_TRIAL_FIRST_INTERVAL if won else
                          min(2 * self._interval, _TRIAL_MAX_INTERVAL))
        self._next_trial = self.batches + self._interval


class _Filler:
    """The background thread of a paced iteration: stages batches of the
    iterator up to depth ahead into a queue, each with its load's CPU
    seconds, until the iterator ends or stop() is called."""

    def __init__(self, iterator, stage, depth):
        self._ready = queue.Queue(depth)
        self._held = []  # a staged item stop() kept from the full queue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(iterator, stage),
                                        name="opt4store-to-device", daemon=True)
        _running[self._thread] = self._stop
        self._thread.start()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=0.1)
                return
            except queue.Full:
                pass
        self._held.append(item)

    def _fill(self, iterator, stage):
        try:
            while not self._stop.is_set():
                c0 = time.thread_time()
                try:
                    batch = next(iterator)
                except StopIteration:
                    self._put(_END)
                    return
                self._put((stage(batch), time.thread_time() - c0, True))
        except BaseException as e:  # noqa: B902  handed to the caller, not swallowed
            self._put(_Failed(e))
        finally:
            _running.pop(threading.current_thread(), None)

    def get(self):
        """The next item: (staged batch, load CPU s, True), _END or a _Failed."""
        return self._ready.get()

    def stop(self):
        """Stops and joins the thread (after the batch it is loading, if
        any); returns the items it staged and nobody took, in order."""
        self._stop.set()
        self._thread.join()
        left = []
        while True:
            try:
                left.append(self._ready.get_nowait())
            except queue.Empty:
                return left + self._held


def _paced(iterator, stage, depth, pace, hand=None):
    """Yields stage(batch) for each batch of iterator: one staged ahead in
    the caller's thread, or, while pace chooses a thread (never with
    depth=0), up to depth ahead on a background thread. What the iterator
    or stage raises is raised in place of its batch, after the batches
    before it; closing this generator stops the thread. hand(), when
    given, is called just before each batch is yielded: the iterator's
    batches staged ahead have not reached the caller yet."""

    def staged_here():
        c0 = time.thread_time()
        try:
            item = stage(next(iterator))
        except StopIteration:
            return _END
        except Exception as e:  # raised after the batch before it; Ctrl-C at once
            return _Failed(e)
        return item, time.thread_time() - c0, False

    ready = collections.deque()  # staged items to yield before loading more
    filler = _Filler(iterator, stage, depth) if depth and not pace.rule else None
    pace.begin()
    handed = None  # when the batch before was handed over
    try:
        while True:
            staged = 0
            came_from_thread = not ready and filler is not None
            if ready:
                item = ready.popleft()
            elif filler:
                item = filler.get()
            else:
                item, staged = staged_here(), 1
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            batch, load, on_thread = item
            pace.note_load(load, on_thread)
            if depth:
                thread = pace.choose()
                if thread and not filler and not ready:
                    filler = _Filler(iterator, stage, depth)
                elif filler and not thread:
                    ready.extend(filler.stop())
                    filler = None
            if not filler and not ready:
                ready.append(staged_here())  # the following batch, before this one is yielded
                staged += 1
            now = time.perf_counter()
            if handed is not None:
                pace.note_period("thread" if came_from_thread and not staged else
                                 "here" if staged == 1 and not came_from_thread else None,
                                 now - handed)
            handed = now
            if hand is not None:
                hand()
            yield batch
            pace.steps.append(time.perf_counter() - now)
    finally:
        if filler:
            filler.stop()


def _ahead(iterator, stage, depth):
    """Yields stage(batch) for each batch of iterator, always staged on a
    background thread up to depth batches ahead (pace=False;
    bench/launch_bench.py's "thread")."""
    return _paced(iterator, stage, depth, _Pace(rule=False))


class _PinnedRing:
    """The side stream and the pinned slots. Used by one filling thread at a time."""

    def __init__(self, device, slots, non_blocking):
        self.device = device
        self.non_blocking = non_blocking
        self.stream = torch.cuda.Stream(device=device)
        self.buffers = [[] for _ in range(slots)]  # per slot: a flat pinned buffer per leaf
        self.events = [None] * slots  # per slot: recorded after its last copies
        self.next = 0

    def stage(self, batch):
        """Starts the copy of batch to the device: (device batch, its event)."""
        s = self.next
        self.next = (s + 1) % len(self.events)
        if self.events[s] is not None:
            self.events[s].synchronize()  # the slot's last copy has completed
        leaves = itertools.count()
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            moved = _apply(batch, lambda t: self._copy(self.buffers[s], next(leaves), t))
            event = torch.cuda.Event()
            event.record(self.stream)
        self.events[s] = event
        return moved, event

    def _copy(self, buffers, i, t):
        if t.device.type == "cpu" and not t.is_pinned():
            buffers.extend([None] * (i + 1 - len(buffers)))
            buf = buffers[i]
            if buf is None or buf.dtype != t.dtype or buf.numel() < t.numel():
                buf = buffers[i] = torch.empty(t.numel(), dtype=t.dtype, pin_memory=True)
            t = buf[:t.numel()].view(t.shape).copy_(t)
        return t.to(self.device, non_blocking=self.non_blocking)


class OwnBatches:
    """A loader's own batches, as the iterable of a DeviceLoader that the
    loader keeps for every epoch (opt4store.DataLoader with ``device=``):
    ``batches`` is the loader's method that starts an epoch's (given a
    deque, it queues there the call that counts each batch: handed()). It
    holds the loader weakly: the pair then makes no reference cycle, and
    dropping the loader frees it at once (its persistent workers are joined
    then, not at the next garbage collection)."""

    def __init__(self, batches):
        self._batches = weakref.WeakMethod(batches)

    def __len__(self):
        return len(self._batches().__self__)

    def __iter__(self):
        return self._batches()()

    def handed(self):
        """(an epoch's batches, hand): a consumer that loads batches ahead
        of its caller calls hand() as each one reaches the caller; the
        loader counts a batch as yielded (state_dict) only then."""
        to_hand = collections.deque()  # per batch the loader made: the call that counts it

        def hand():
            if to_hand:
                to_hand.popleft()()
        return self._batches()(to_hand), hand


def _handed(loader):
    """(an iterator over loader's batches, its hand() or None): for an
    OwnBatches, or an opt4store.DataLoader (its _own_batches), the batches
    that count as yielded only once handed (OwnBatches.handed)."""
    own = loader if isinstance(loader, OwnBatches) else getattr(loader, "_own_batches", None)
    if isinstance(own, OwnBatches):
        return own.handed()
    return iter(loader), None


class DeviceLoader:
    """Iterates a loader and yields each batch on ``device``; on CUDA the
    copies run ahead of the caller as the module's docstring says. len() is
    the loader's."""

    def __init__(self, loader, device, non_blocking=True, depth=2, pace=True):
        if not hasattr(loader, "__iter__"):
            raise InvalidTypeError(f"loader: expected an iterable of batches, got "
                                   f"{type(loader).__name__}")
        self.loader = loader
        self.device = check_device("device", device)
        self.non_blocking = check_bool("non_blocking", non_blocking)
        self.depth = check_int("depth", depth, 0, _MAX_DEPTH)
        self.pace = check_bool("pace", pace)
        self._ring = None  # kept between iterations; the running one holds it
        self._pace = _Pace(self.pace)  # kept between iterations too

    def __len__(self):
        return len(self.loader)

    @property
    def batches_on_thread(self):
        """How many batches the background thread has staged, over every
        iteration (the rest were staged in the caller's thread)."""
        return self._pace.batches_on_thread

    @property
    def trials(self):
        """How many trials the pace made (batches staged in the other place
        to time them: the module's docstring), over every iteration."""
        return self._pace.trials

    def __iter__(self):
        if self.device.type == "cpu":
            yield from self.loader
            return
        if self.device.type != "cuda":
            for batch in self.loader:
                yield _apply(batch, lambda t: t.to(self.device))
            return
        device = (self.device if self.device.index is not None else
                  torch.device("cuda", torch.cuda.current_device()))
        ring, self._ring = self._ring, None
        if ring is None or ring.device != device:
            ring = _PinnedRing(device, max(self.depth, 1) + 1, self.non_blocking)
        iterator, hand = _handed(self.loader)
        batches = _paced(iterator, ring.stage, self.depth, self._pace, hand)
        try:
            for moved, event in batches:
                current = torch.cuda.current_stream(device)
                current.wait_event(event)
                _apply(moved, lambda t: t.record_stream(current))
                yield moved
        finally:
            batches.close()  # joins the thread (if any): the ring is free again
            self._ring = ring


def to_device(loader, device, non_blocking=True, depth=2, pace=True):
    """Wraps a loader so that its batches arrive on ``device``, copied ahead
    of the caller through pinned memory on a side CUDA stream (DeviceLoader):
    one batch staged ahead in the caller's thread, or up to ``depth`` ahead
    on a background thread while loading costs the step more than a thread
    would (the pace rule, and its trials where the choice is close;
    depth=0: never a thread; pace=False: always the thread). On the CPU it
    is the identity: the loader itself is returned."""
    device = check_device("device", device)
    check_bool("non_blocking", non_blocking)
    check_int("depth", depth, 0, _MAX_DEPTH)
    check_bool("pace", pace)
    if not hasattr(loader, "__iter__"):
        raise InvalidTypeError(f"loader: expected an iterable of batches, got "
                               f"{type(loader).__name__}")
    if device.type == "cpu":
        return loader
    return DeviceLoader(loader, device, non_blocking, depth, pace)
