"""How a batch of same-layout samples is made from the store, for
opt4store.DataLoader (loader.py): a sample's layout (its meta bytes and the
offsets, dtypes and shapes of its leaves), the batch tensors it fills (one
per leaf, from a pool that reuses memory nobody holds), how default_collate
nests them, and the shared slots that workers write into."""

import errno
import math
import os
import random
import weakref

import numpy as np
import torch
import torch.utils.data

from . import _core, _values
from ._errors import NoSpaceError

default_collate = getattr(torch.utils.data, "default_collate", None) or \
    torch.utils.data.dataloader.default_collate

_TORCH_DTYPES = {v: k for k, v in _values.TORCH_DTYPE_NAMES.items()}
_SCALAR_DTYPES = {"i": torch.int64, "f": torch.float64, "b": torch.bool}


def _is_leaf(value):
    """A leaf of a stored structure, in _values' encoding: a tensor, an
    array, or a Python number that fits an int64."""
    if isinstance(value, (torch.Tensor, np.ndarray, float)):
        return True
    return isinstance(value, int) and -(1 << 63) <= value < (1 << 63)


def resolved(value):
    """value with each conjugate or negative view tensor made plain, as the
    store keeps it: a worker sends values back through torch's
    multiprocessing pickler, which drops those bits."""
    def plain(leaf):
        if isinstance(leaf, torch.Tensor) and (leaf.is_conj() or leaf.is_neg()):
            return leaf.resolve_conj().resolve_neg()
        return leaf
    return _map_leaves(value, plain)


def _map_leaves(value, fn):
    """value with each leaf replaced by fn(leaf), in the encoder's order
    (depth first, containers in iteration order), containers keeping their
    types."""
    if _is_leaf(value):
        return fn(value)
    if isinstance(value, (tuple, list, dict)):
        return _values.map_container(value, lambda v: _map_leaves(v, fn))
    return value


# ---------------------------------------------------------------- layouts


class NoLayout(Exception):
    """A value the fast path cannot assemble: the general path takes it."""


def encode(value):
    """(meta, [(offset, uint8 tensor)], payload size) as the store keeps
    value; the pieces may share value's memory."""
    if _values.plain_tensor(value):
        t = value.detach().cpu().resolve_conj().resolve_neg().contiguous()
        meta = _core.encode_header(_values.TORCH_DTYPE_NAMES[t.dtype], list(t.shape),
                                   _values.TAG_TENSOR, b"")
        data = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
        return meta, [(0, data)], data.numel()
    meta, chunks, size = _values.encode_parts(value)
    return meta, [(offset, torch.from_numpy(data)) for offset, data in chunks], size


def _leaf_dtype(kind, dtype):
    if kind in _SCALAR_DTYPES:
        return _SCALAR_DTYPES[kind]
    if kind == "t":
        return _TORCH_DTYPES[dtype]
    try:  # a numpy array: default_collate makes it a tensor of the same dtype
        return torch.from_numpy(np.empty(0, np.dtype(dtype))).dtype
    except TypeError:
        raise NoLayout(f"numpy dtype {dtype} has no torch dtype") from None


class Layout:
    """How each sample of one shape lies in the store (its meta bytes and
    the offsets, dtypes and shapes of its leaves), and how default_collate
    nests a batch of them."""

    def __init__(self, value):
        if isinstance(value, (tuple, list, dict)) and not _values.structurable(value):
            raise NoLayout("a sample holding other objects")
        if _has_other_tensors(value):
            raise NoLayout("numpy scalars collate to tensors")
        self.meta, _, self.payload_bytes = encode(value)
        leaves = _values.layout(self.meta)
        if not leaves:
            raise NoLayout("a sample without tensors, arrays or numbers")
        self.offsets = [leaf[3] for leaf in leaves]
        self.dtypes = [_leaf_dtype(leaf[0], leaf[1]) for leaf in leaves]
        self.shapes = [tuple(leaf[2]) for leaf in leaves]
        self.nbytes = [leaf[4] for leaf in leaves]
        self.kinds = [leaf[0] for leaf in leaves]
        # A copy of the sample whose leaves are markers (their index), so
        # that collating it shows where each leaf's batch tensor goes.
        count = []
        _map_leaves(value, count.append)
        if len(count) != len(leaves):  # the encoder and this walk disagree
            raise NoLayout("a sample whose leaves the store does not lay out one by one")
        marks = iter(range(len(leaves)))
        self._stand_in = _map_leaves(value, lambda leaf: torch.tensor(next(marks)))
        self._nests = {}
        self._pool = _BatchPool(self.shapes, self.dtypes)

    def __getstate__(self):
        # Spawn workers get the layout with their jobs' Filler; the nesting
        # closures and the pool's weak references do not pickle, and only
        # the main process nests batches or takes them from the pool.
        state = dict(self.__dict__)
        state["_nests"] = {}
        state["_pool"] = _BatchPool(self.shapes, self.dtypes)
        return state

    def empty(self, rows, pin=False):
        """Fresh-looking batch tensors: from the pool when a batch that the
        caller has let go of can be reused (see _BatchPool)."""
        if pin:
            return [torch.empty((rows,) + shape, dtype=dtype, pin_memory=True)
                    for shape, dtype in zip(self.shapes, self.dtypes)]
        return self._pool.take(rows)

    def nest(self, leaves):
        """The batch as default_collate nests it, holding `leaves`."""
        rows = leaves[0].shape[0]
        build = self._nests.get(rows)
        if build is None:
            build = self._nests[rows] = _builder(default_collate([self._stand_in] * rows))
        return build(leaves)

    def row_value(self, leaves, row):
        """Row `row` of the batch as the sample it was: tensors, arrays and
        Python numbers in the sample's containers."""
        def leaf_value(marker):
            j = int(marker)
            t = leaves[j][row]
            if self.kinds[j] == "t":
                return t.clone()
            if self.kinds[j] in _SCALAR_DTYPES:
                return t.item()
            return t.numpy().copy()
        return _map_leaves(self._stand_in, leaf_value)

    def write_row(self, leaves, row, value):
        """Writes value's leaves into row `row` of `leaves` (one copy each);
        False if value has another layout."""
        meta, chunks, _ = encode(value)
        if meta != self.meta:
            return False
        for leaf, (_, data) in zip(leaves, chunks):
            leaf[row].view(-1).view(torch.uint8).copy_(data)
        return True


_slot_cache = {}
_layout_cache = {}


def probe(transform, value):
    """transform(value) with the random generators it may draw from (torch,
    random, numpy) put back as they were: the layout of a transformed
    sample, found without changing what the reads' transforms draw."""
    torch_state = torch.random.get_rng_state()
    py_state = random.getstate()
    np_state = np.random.get_state()
    try:
        return transform(value)
    finally:
        torch.random.set_rng_state(torch_state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def layout_of(value):
    """value's Layout, the one an earlier loader made for the same meta
    when there is one: its batch pool and nesting are ready (users make a
    loader per epoch; a new pool page-faults its first batches again)."""
    meta = encode(value)[0]
    layout = _layout_cache.get(meta)
    if layout is None:
        layout = Layout(value)
        if len(_layout_cache) >= 4:
            _layout_cache.clear()
        _layout_cache[meta] = layout
    return layout


def shared_slots(layout, rows, count):
    """A SharedSlots of count slots for this layout. Kept for the next
    loader over the same layout (users make a loader per epoch; making them
    takes 0.2 s for float batches of 25 MiB here): one set, the last one
    asked for. Loaders that share it take slots from it, never the same one
    at once."""
    key = (layout.meta, rows, count)
    slots = _slot_cache.get(key)
    if slots is None:
        _slot_cache.clear()
        slots = _slot_cache[key] = SharedSlots(layout, rows, count)
    return slots


def drop_kept():
    """Lets go of the slots and layouts kept for the next loader, at a
    store's close (its loaders are done): their memory, the slots' in
    /dev/shm (num_workers x prefetch_factor + 4 batches), goes once no loader
    holds it, instead of staying until the process ends."""
    _slot_cache.clear()
    _layout_cache.clear()


def slots_for(layout, rows):
    """The kept SharedSlots for this layout and batch size, or None. A batch
    with no job may borrow one of its free slots: a later loader over the
    same data then writes into memory that the workers' epoch has paged in
    already, instead of page-faulting fresh batches."""
    for (meta, slot_rows, _), slots in _slot_cache.items():
        if meta == layout.meta and slot_rows == rows:
            return slots
    return None


# Where torch's CPU shared memory lives (shm_open), both sharing strategies.
_SHM_FOLDER = "/dev/shm"


def shared_tensor(shape, dtype):
    """An uninitialized tensor in shared memory whose pages are reserved in
    /dev/shm up front, or NoSpaceError naming the room it needs.

    A worker that wrote a slot's row into a page /dev/shm cannot give would
    die of SIGBUS, and so would the main process reading it. Tensor.
    share_memory_() copies the tensor into new shared memory (0.2 s for 200
    MiB of float slots here, on the first batch of a restart); new shared
    memory with its pages allocated (posix_fallocate, under torch's default
    file_descriptor strategy) takes a third of that, and its pages are
    mapped by whichever process touches them first."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    _check_shm_room(nbytes)
    new_shared = getattr(getattr(torch, "UntypedStorage", None), "_new_shared", None)
    if new_shared is None:  # a torch without UntypedStorage: copy into shared memory
        return torch.empty(shape, dtype=dtype).share_memory_()
    storage = new_shared(nbytes)
    # torch's own calls (torch.multiprocessing's), looked up: absent, the
    # room was still checked above.
    share_fd = getattr(storage, "_share_fd_cpu_", None)
    if nbytes and share_fd and torch.multiprocessing.get_sharing_strategy() == "file_descriptor":
        fd, size = share_fd()
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:  # else a file system that cannot reserve: checked above
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                _raise_no_shm_room(nbytes, e.strerror)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def _check_shm_room(nbytes):
    try:
        folder = os.statvfs(_SHM_FOLDER)
    except OSError:
        return  # no such folder to ask: the allocation itself will tell
    if folder.f_bavail * folder.f_frsize < nbytes:
        _raise_no_shm_room(nbytes, "%.1f MiB free" % (folder.f_bavail * folder.f_frsize / 2**20))


def _lent_view(a, refs):
    """A new numpy view of `a`, for torch.from_numpy, with a weak reference
    to it added to `refs`. The tensors made from it, and every view of
    them, hold it through their storage: the reference dies when the last
    of them does, and only then may a's memory be written again. (Counting
    a's own references instead gives another number on each interpreter:
    CPython 3.14 borrows references that 3.13 counted.)"""
    v = a.view()
    refs.append(weakref.ref(v))
    return v


def _alive(refs):
    """Drops the dead references of `refs`; True if any is left."""
    refs[:] = [r for r in refs if r() is not None]
    return bool(refs)


def _raise_no_shm_room(nbytes, why):
    raise NoSpaceError(
        f"no space: opt4store.DataLoader's batch slot of {nbytes / 2**20:.1f} MiB does not fit "
        f"in {_SHM_FOLDER} ({why}); enlarge {_SHM_FOLDER} (docker --shm-size), or lower "
        "batch_size, num_workers or prefetch_factor (the workers write into num_workers x "
        "prefetch_factor + 4 slots of a batch each)")


class SharedSlots:
    """Batch tensors in shared memory (one per leaf per slot) that workers
    write rows into. A slot is taken for one batch's job and given back when
    the main process has the batch; it may then be lent: the batch yielded
    is the slot itself, with no copy. The tensors lent out hold views of the
    slot's numpy arrays through their storage (as _BatchPool's do), so weak
    references to those views tell when nobody holds a lent slot any more,
    and only then is it taken again. Slots made after the workers started
    travel with their jobs (`known` says how many the workers hold)."""

    def __init__(self, layout, rows, count):
        self.layout, self.rows = layout, rows
        self.tensors, self.arrays = [], []
        self.lent = []  # per slot: weak references to the views lent (_lent_view)
        self.busy = set()
        for _ in range(count):
            self._grow()
        self.known = count

    def _grow(self):
        slot = [shared_tensor((self.rows,) + shape, dtype)
                for shape, dtype in zip(self.layout.shapes, self.layout.dtypes)]
        self.tensors.append(slot)
        self.arrays.append([t.view(-1).view(torch.uint8).numpy() if t.numel() else None
                            for t in slot])
        self.lent.append([])

    def held(self, k):
        """True while a tensor lent from slot k (or a view of one) is alive."""
        return _alive(self.lent[k])

    def held_count(self):
        return sum(1 for k in range(len(self.tensors)) if k not in self.busy and self.held(k))

    def take(self):
        """A free slot's number, marked busy (a new slot when none is free)."""
        for k in range(len(self.tensors)):
            if k not in self.busy and not self.held(k):
                self.busy.add(k)
                return k
        self._grow()
        self.busy.add(len(self.tensors) - 1)
        return len(self.tensors) - 1

    def give_back(self, k):
        self.busy.discard(k)

    def borrow(self, rows):
        """A free slot's first `rows` rows as batch tensors (see lend), or
        None when every slot is busy or held; never grows."""
        for k in range(len(self.tensors)):
            if k not in self.busy and not self.held(k):
                return self.lend(k, rows)
        return None

    def lend(self, k, rows):
        """Slot k's first `rows` rows as batch tensors that keep it held."""
        out = []
        for a, dtype, shape in zip(self.arrays[k], self.layout.dtypes, self.layout.shapes):
            t = _lent_leaf(a, self.lent[k], dtype, self.rows, shape)
            out.append(t if rows == self.rows else t[:rows])
        return out


def _lent_leaf(a, refs, dtype, rows, shape):
    """The uint8 array `a` as a (rows,) + shape tensor of dtype that holds a
    view of it lent (_lent_view). A leaf of no elements (a detection sample
    without boxes; `a` None or empty) has no memory to view: torch.from_numpy
    gives an empty array stride 0, which view() refuses."""
    if a is None or not a.size:
        return torch.empty((rows,) + shape, dtype=dtype)
    t = torch.from_numpy(_lent_view(a, refs))  # uint8: views only where needed
    return (t if dtype is torch.uint8 else t.view(dtype)).view((rows,) + shape)


def copy_rows(leaf, rows, src):
    """leaf[r] = src[r] for r in rows, by runs of consecutive rows
    (index_copy_ is about 14 times slower than copy_ on uint8 images here)."""
    k = 0
    while k < len(rows):
        end = k + 1
        while end < len(rows) and rows[end] == rows[end - 1] + 1:
            end += 1
        leaf[rows[k]:rows[end - 1] + 1].copy_(src[rows[k]:rows[end - 1] + 1])
        k = end


class _BatchPool:
    """Batch tensors reused once nobody holds them. A training loop holds
    batch k while the loader makes batch k + 1, so a fresh allocation each
    time page-faults every byte of it (6 ms for a 6 MiB batch here, against
    1 ms to fill a reused one). Each batch's memory is a numpy array that the
    pool keeps; the tensors handed out (and any view of them) hold a view of
    it through their storage, so a weak reference to that view tells when
    none is left, and only then is it reused. A caller that keeps batches makes the pool
    allocate new ones; it never hands out memory someone still sees."""

    _KEEP = 4  # arrays kept per batch size

    def __init__(self, shapes, dtypes):
        self.shapes, self.dtypes = shapes, dtypes
        self.itemsizes = [torch.empty(0, dtype=d).element_size() for d in dtypes]
        self.free = {}  # rows -> [([array per leaf], [weak references lent])]

    def take(self, rows):
        entries = self.free.setdefault(rows, [])
        for arrays, refs in entries:
            if not _alive(refs):
                return self._tensors(arrays, refs, rows)
        arrays = [np.empty(rows * int(np.prod(shape, dtype=np.int64)) * size, np.uint8)
                  for shape, size in zip(self.shapes, self.itemsizes)]
        refs = []
        if len(entries) < self._KEEP:
            entries.append((arrays, refs))
        return self._tensors(arrays, refs, rows)

    def _tensors(self, arrays, refs, rows):
        return [_lent_leaf(a, refs, dtype, rows, shape)
                for a, dtype, shape in zip(arrays, self.dtypes, self.shapes)]


def _has_other_tensors(value):
    """True when value holds numpy scalars (np.float32(1.0)): default_collate
    makes tensors of them, which _fill would take for markers."""
    if isinstance(value, np.generic):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_other_tensors(v) for v in value)
    if isinstance(value, dict):
        return any(_has_other_tensors(v) for v in value.values())
    return False


def _builder(node):
    """A function of the leaves that makes what _fill(node, leaves) makes,
    with node's walk done once: plain tuples, lists and dicts are rebuilt by
    closures (a new container per batch, as _fill makes); other containers
    are left to _fill."""
    if isinstance(node, torch.Tensor):
        j = int(node.reshape(-1)[0])
        return lambda leaves: leaves[j]
    if type(node) in (tuple, list):
        parts = [_builder(x) for x in node]
        if type(node) is list:
            return lambda leaves: [part(leaves) for part in parts]
        return lambda leaves: tuple(part(leaves) for part in parts)
    if type(node) is dict:
        parts = [(k, _builder(x)) for k, x in node.items()]
        return lambda leaves: {k: part(leaves) for k, part in parts}
    if isinstance(node, (tuple, list, dict)):
        return lambda leaves: _fill(node, leaves)
    return lambda leaves: node


def _fill(node, leaves):
    """The collated stand-in `node` with each marker tensor replaced by the
    leaf tensor it names."""
    if isinstance(node, torch.Tensor):
        return leaves[int(node.reshape(-1)[0])]
    if isinstance(node, (tuple, list, dict)):
        return _values.map_container(node, lambda x: _fill(x, leaves))
    return node


# ---------------------------------------------------------------- workers


