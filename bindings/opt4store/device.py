"""to_device: batches copied to the GPU ahead of the step that uses them.

On CUDA, a DeviceLoader runs the loader in a background thread up to
``depth`` batches ahead of the caller. For each batch that thread copies
every CPU tensor into a pinned host buffer, one of ``depth + 1`` slots reused
round-robin, and issues the host-to-device copies with non_blocking on a side
stream. So the loader's own work (all of it with num_workers=0), the copy into
pinned memory and the transfer overlap the caller's compute on earlier
batches. Tensors that are already pinned (DataLoader pin_memory=True) are
copied from where they are.

depth=0: no thread. The caller's next() takes the following batch from the
loader and stages it (pinned copy, copies queued on the side stream) before
it returns the current one, so only the transfer overlaps the caller's
compute. It is meant for a step bound by its kernel launches, from which a
thread's Python work would take the GIL (bench/launch_bench.py).

Ordering: a slot is refilled only after the copy out of it has completed (the
thread, or the caller with depth=0, waits on the CUDA event recorded after
that copy). The caller's current
stream waits on a batch's event before the batch is yielded, and each device
tensor is tied to that stream (record_stream), so its memory is not reused
while the caller's kernels read it.

Memory: pinned host memory of (max(depth, 1) + 1) x the largest batch,
allocated on the first batch and kept across epochs (a leaf's buffer is
reallocated when a tensor needs more bytes or another dtype; a smaller one,
such as a last partial batch, uses a prefix of it); device memory for up to
depth + 3 batches (queued, being copied, and the caller's last two).

Threads: iterate a DeviceLoader from one thread at a time, as a DataLoader
(two iterations alive at once each get their own slots). The loader's
iterator is created in the caller's thread and advanced in the background
thread (in the caller's with depth=0), which a DataLoader allows. An
exception raised by the loader is raised in the caller in place of the batch
that failed. Leaving the loop early (break, an exception) stops the
background thread and waits for it, which takes at most the time to load
the batch it is on.

On the CPU, to_device returns the loader itself. Batches keep their
containers (tuple, list, dict, namedtuple); other values pass as they are.
"""

import atexit
import itertools
import queue
import threading
import weakref

import torch

from ._checks import check_bool, check_int
from ._errors import InvalidArgumentError, InvalidTypeError

# The most batches DeviceLoader copies ahead: each holds a pinned buffer.
_MAX_DEPTH = 1 << 10


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


def _staged_inline(iterator, stage):
    """Yields stage(batch) for each batch of iterator, in the caller's thread,
    each following batch staged before the current one is yielded. What the
    iterator or stage raises is raised in place of its batch, after the
    batches before it, as _ahead does."""
    pending = _END
    while True:
        try:
            following = stage(next(iterator))
        except StopIteration:
            following = _END
        except BaseException as e:  # noqa: B902  raised after the batch before it
            following = _Failed(e)
        if pending is not _END:
            yield pending
        if isinstance(following, _Failed):
            raise following.error
        if following is _END:
            return
        pending = following


def _ahead(iterator, stage, depth):
    """Yields stage(batch) for each batch of iterator, computed in a
    background thread up to depth batches ahead. What the iterator or stage
    raises is raised here; closing this generator stops the thread."""
    ready = queue.Queue(depth)
    stop = threading.Event()

    def put(item):
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def fill():
        try:
            for batch in iterator:
                if stop.is_set() or not put(stage(batch)):
                    return
            put(_END)
        except BaseException as e:  # noqa: B902  handed to the caller, not swallowed
            put(_Failed(e))
        finally:
            _running.pop(threading.current_thread(), None)

    thread = threading.Thread(target=fill, name="opt4store-to-device", daemon=True)
    _running[thread] = stop
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


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
    ``batches`` is the loader's method that starts an epoch's. It holds the
    loader weakly: the pair then makes no reference cycle, and dropping the
    loader frees it at once (its persistent workers are joined then, not at
    the next garbage collection)."""

    def __init__(self, batches):
        self._batches = weakref.WeakMethod(batches)

    def __len__(self):
        return len(self._batches().__self__)

    def __iter__(self):
        return self._batches()()


class DeviceLoader:
    """Iterates a loader and yields each batch on ``device``; on CUDA the
    copies run ahead of the caller as the module's docstring says. len() is
    the loader's."""

    def __init__(self, loader, device, non_blocking=True, depth=2):
        if not hasattr(loader, "__iter__"):
            raise InvalidTypeError(f"loader: expected an iterable of batches, got "
                                   f"{type(loader).__name__}")
        self.loader = loader
        self.device = check_device("device", device)
        self.non_blocking = check_bool("non_blocking", non_blocking)
        self.depth = check_int("depth", depth, 0, _MAX_DEPTH)
        self._ring = None  # kept between iterations; the running one holds it

    def __len__(self):
        return len(self.loader)

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
        batches = (_ahead(iter(self.loader), ring.stage, self.depth) if self.depth else
                   _staged_inline(iter(self.loader), ring.stage))
        try:
            for moved, event in batches:
                current = torch.cuda.current_stream(device)
                current.wait_event(event)
                _apply(moved, lambda t: t.record_stream(current))
                yield moved
        finally:
            batches.close()  # joins the thread (if any): the ring is free again
            self._ring = ring


def to_device(loader, device, non_blocking=True, depth=2):
    """Wraps a loader so that its batches arrive on ``device``, copied ahead
    of the caller through pinned memory on a side CUDA stream (DeviceLoader):
    up to ``depth`` batches ahead on a background thread, or with depth=0 one
    batch staged ahead in the caller's thread. On the CPU it is the identity:
    the loader itself is returned."""
    device = check_device("device", device)
    check_bool("non_blocking", non_blocking)
    check_int("depth", depth, 0, _MAX_DEPTH)
    if not hasattr(loader, "__iter__"):
        raise InvalidTypeError(f"loader: expected an iterable of batches, got "
                               f"{type(loader).__name__}")
    if device.type == "cpu":
        return loader
    return DeviceLoader(loader, device, non_blocking, depth)
