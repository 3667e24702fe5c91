"""CachedDataset: a Dataset whose items come from an opt4store Store."""

import warnings

import numpy as np
import torch
import torch.utils.data

from ._checks import MAX_UINT64, check_callable, check_index, check_int, check_sequence
from ._errors import InvalidArgumentError, InvalidTypeError, StaleStoreError
from ._values import same_value
from .sampler import PlannedIndex, PlannedSampler
from .store import MISS, NO_POSITION, WARN_DRIFT, Store

# The spot check looks for values the store holds this many ids at a time,
# and picks its ids spread over the first _SPOT_CANDIDATES it finds.
_SPOT_CHUNK = 1 << 16
_SPOT_CANDIDATES = 1024


# Store.warn_once's kind for a PlannedIndex read without a plan (kinds 32-63
# are the package's: _values.WARN_PICKLE, distributed.WARN_UNSHARED).
WARN_UNPLANNED = 34


class CachedDataset(torch.utils.data.Dataset):
    """``CachedDataset(dataset, store, sampler)``: ``ds[i]`` equals
    ``dataset[i]``, served from the store when it holds it; on a miss the
    dataset is called once and the value stored. Give the DataLoader the same
    ``sampler`` (a PlannedSampler): its indices carry their plan positions,
    which drive eviction and prefetch.

    A plain int index (no position) works too: in the main process it is
    taken as the next plan position when the plan reads it there, else (a
    loader's own shuffle, a Subset) as in a worker (a wrapper Dataset
    calling ``ds[int(i)]``): the index's first read in the plan at or after
    the readers' frontier, in that epoch or the next. An index the plan does
    not read there is drift: the value is still right, the store counts it,
    and a warning is issued once.

    ``transform=``: a callable applied to every value read, after the cache
    (random augmentation belongs here: the store keeps the untransformed
    value, and each read transforms it anew). ``__getitems__`` reads a whole
    batch with one call into the store (torch's DataLoader calls it for a
    batch), loading only the misses from ``dataset``.

    ``spot_check=2``: when the store was opened without a ``fingerprint=``
    and already holds values, this many of them are loaded from ``dataset``
    once each (here, in the process that makes the CachedDataset, not in
    DataLoader workers, from a shallow copy of ``dataset``, so that a handle
    its ``__getitem__`` opens on first use is not left open for forked
    workers to inherit) and compared with what the store holds, read
    without counting an access (``Store.peek``). A value that differs from
    two equal loads raises ``StaleStoreError`` (the store was filled by
    another transform or dataset); two loads that differ from each other
    warn, once, that the dataset is not deterministic. 0 turns it off. A
    cluster store (``shared="cluster"``) is not checked: its peers fill it
    while it binds.
    """

    def __init__(self, dataset, store, sampler=None, transform=None, spot_check=2):
        if isinstance(dataset, (str, bytes, bytearray)) or not (
                hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise InvalidTypeError(f"dataset: expected a map-style Dataset (with __len__ and "
                                   f"__getitem__), got {type(dataset).__name__}")
        if not isinstance(store, Store):
            raise InvalidTypeError(f"store: expected an opt4store.Store, got "
                                   f"{type(store).__name__}")
        if sampler is not None and not isinstance(sampler, PlannedSampler):
            raise InvalidTypeError(f"sampler: expected an opt4store.PlannedSampler or None, got "
                                   f"{type(sampler).__name__}")
        check_callable("transform", transform)
        spot_check = check_int("spot_check", spot_check, 0, MAX_UINT64)
        self.dataset = dataset
        self.store = store
        self.sampler = sampler
        self.transform = transform
        self._size = len(dataset)  # fixed: the store is bound to it
        store.bind(self._size, sampler, source=dataset)
        # The plan as the store numbers positions (host positions when the
        # store is shared by a host's local ranks): the sampler's window of
        # recorded epochs (a PlanWindow), shared with it in this process; a
        # worker holds the epochs recorded when it started.
        self._plan = sampler.store_plan() if sampler is not None else None
        self._cursor = sampler.position() if sampler is not None else 0
        self._stride, self._offset = sampler.store_layout if sampler is not None else (1, 0)
        # Kept apart from the sampler, which workers do not get.
        self._epoch_length = getattr(sampler, "epoch_length", 0) if sampler is not None else 0
        self._inverses = {}
        # Not a cluster store's: its peers fill it while it binds.
        if spot_check and store.fingerprint is None and store.is_owner and \
                store.shared != "cluster":
            self._spot_check(spot_check)

    def __len__(self):
        return len(self.dataset)

    def __repr__(self):
        return (f"opt4store.CachedDataset({type(self.dataset).__name__} of {len(self)} items, "
                f"{self.store!r})")

    def __getitem__(self, index):
        value = self.load(index)
        return value if self.transform is None else self.transform(value)

    def __getitems__(self, indices):
        """The values of a batch of indices, read from the store in one call;
        the misses are loaded from the dataset and stored."""
        size = self._size
        indices = [index if type(index) is int and 0 <= index < size else
                   _checked_index("indices", index, size)
                   for index in check_sequence("indices", indices)]
        values = self.load_batch([self._position(index) for index in indices], indices)
        if self.transform is not None:
            values = [self.transform(value) for value in values]
        return values

    def load_batch(self, positions, indices, unstored=None, again=()):
        """The untransformed values of (positions[i], indices[i]): read from
        the store a run of distinct indices at a time, each run's misses
        loaded and stored before the next run is read, so that an index
        repeated in a batch is loaded once, as reads one by one would.
        unstored: a list that receives the i of misses loaded and NOT
        stored, which the caller stores itself (an index that occurs again
        in the batch, or is in `again`, is stored here all the same)."""
        if len(check_sequence("positions", positions)) != len(check_sequence("indices", indices)):
            raise InvalidArgumentError(f"positions and indices: {len(positions)} positions for "
                                       f"{len(indices)} indices")
        repeated = set(again)
        if unstored is not None:
            seen = set()
            for index in indices:
                (repeated if int(index) in seen else seen).add(int(index))
        values = []
        start = 0
        while start < len(indices):
            seen = set()
            end = start
            while end < len(indices) and int(indices[end]) not in seen:
                seen.add(int(indices[end]))
                end += 1
            run = self.store.get_batch(positions[start:end], indices[start:end], default=MISS)
            for k, value in enumerate(run):
                if value is MISS:
                    i = start + k
                    if unstored is None or int(indices[i]) in repeated:
                        run[k] = self.load_miss(positions[i], indices[i])
                    else:
                        run[k] = self._load_source(indices[i])
                        unstored.append(i)
            values.extend(run)
            start = end
        return values

    def load(self, index):
        """The untransformed value of ``index``: from the store, or loaded from
        the dataset and stored."""
        if type(index) is not int or not 0 <= index < self._size:  # before it takes a position
            index = _checked_index("index", index, self._size)
        position = self._position(index)
        result = self.store.get(position, index, default=MISS)
        return result if result is not MISS else self.load_miss(position, index)

    def position_of(self, index):
        """The plan position of a read of ``index`` (NO_POSITION when unknown),
        as __getitem__ sees it (a plain int in the main process takes the
        next one, or its own; see the class docstring)."""
        return self._position(index)

    def _position(self, index):
        position = getattr(index, "position", None)
        if position is None:
            return self._guess_position(index)
        if self._plan is not None:
            planned = self._plan.planned(position)
            if planned is not None and planned != index:  # None: an epoch not held here
                self._drift(index, position)
        else:
            self.store.warn_once(
                WARN_UNPLANNED,
                "opt4store: a PlannedSampler's indices reach a CachedDataset made without "
                "it, so the store runs without its plan (no OPT eviction, no prefetch): "
                "give the sampler to it as well, CachedDataset(dataset, store, sampler)")
        return position

    def _recover_position(self, index):
        """The position of a plain int read in a DataLoader worker (a wrapper
        Dataset that calls ``ds[int(i)]`` loses the PlannedIndex), or in the
        main process in another order than the plan's: the
        index's first read in the plan at or after the readers' frontier (or
        the start of the epoch the sampler began last, when later), in that
        epoch or the next, so that the read counts as the
        plan's (hits, eviction and the frontier as with a PlannedIndex).
        NO_POSITION when the plan has no epochs to look in, or the store is
        shared by local ranks (their positions interleave)."""
        length = self._epoch_length
        if not length or self._stride != 1:
            return NO_POSITION
        frontier = self.store.reading_from()
        if frontier == NO_POSITION or not 0 <= index < self._size:
            return NO_POSITION
        epoch = frontier // length
        for e in (epoch, epoch + 1):
            inverse = self._epoch_inverse(e, length)
            if inverse is None:
                break
            position = e * length + int(inverse[index])
            if inverse[index] >= 0 and position >= frontier:
                return position
        return NO_POSITION

    def _epoch_inverse(self, epoch, length):
        """{index: its first offset in epoch `epoch`} as an array (-1: not
        read there); the last two epochs asked for are kept."""
        cache = self._inverses
        inverse = cache.get(epoch)
        if inverse is None:
            ids = self._plan.epoch_ids(epoch)
            if ids is None:
                return None
            inverse = np.full(len(self.dataset), -1, dtype=np.int64)
            inverse[ids[::-1]] = np.arange(length - 1, -1, -1)  # the first read wins
            if len(cache) >= 2:
                cache.pop(min(cache))
            cache[epoch] = inverse
        return inverse

    def load_miss(self, position, index):
        """Loads ``index`` from the dataset and stores it for ``position``
        (a read that found nothing): the untransformed value."""
        value = self.dataset[int(index)]
        self.store.put(position, int(index), value)
        return _as_read(value)

    def _load_source(self, index):
        """load_miss without the store: the caller stores the value."""
        return _as_read(self.dataset[int(index)])

    def _guess_position(self, index):
        if self._plan is None or self._stride == 0:  # none, or a cluster store's
            return NO_POSITION
        if torch.utils.data.get_worker_info() is not None:
            return self._recover_position(int(index))
        position = self._cursor * self._stride + self._offset
        self._cursor += 1
        if position >= len(self._plan):
            return NO_POSITION  # past the planned epochs: an unplanned read
        planned = self._plan.planned(position)
        if planned is not None and planned != index:
            # Another order of the plan's reads (a loader's own shuffle, a
            # Subset): the index's own position, as a worker finds it.
            recovered = self._recover_position(int(index))
            if recovered != NO_POSITION:
                return recovered
            self._drift(index, position)
        return position

    def _drift(self, index, position):
        self.store.warn_once(
            WARN_DRIFT,
            f"opt4store: index {int(index)} at plan position {position} is not what the "
            "plan predicted (drift); values stay correct, but eviction and prefetch follow "
            "the plan. stats()['drift'] counts such reads.")

    # ---- the spot check (see the class docstring)

    def _spot_check(self, count):
        source = _apart(self.dataset)
        for index in self._held_indices(count):
            stored = self.store.peek(index, default=MISS)
            if stored is MISS:
                continue  # evicted meanwhile
            loaded = source[index]
            if same_value(stored, loaded):
                continue
            if not same_value(loaded, source[index]):
                warnings.warn(
                    f"opt4store: dataset[{index}] gave different values on two loads: the "
                    "dataset is not deterministic. The store keeps the first value it is given "
                    "and serves it in every epoch, which would freeze its random transforms: "
                    "pass them to CachedDataset(..., transform=), which runs after the cache on "
                    "every read, and keep the dataset deterministic.",
                    RuntimeWarning, stacklevel=3)
                return
            path = self.store.path
            raise StaleStoreError(
                f"the store at {path!r} holds a value for index {index} that differs from "
                f"dataset[{index}]: it was filled by another version of the dataset (another "
                "transform, or another dataset of the same length), and would serve stale "
                f"values. Close it, then reopen it with opt4store.Store({path!r}, ..., "
                f"reset=True) to empty it and go on, or run 'opt4store clear {path}' first; "
                "give Store(fingerprint=...) to version the store.")

    def _held_indices(self, count):
        """Up to ``count`` indices the store holds, spread over the first
        ones found."""
        stats = self.store.stats()
        if stats["ram_items"] + stats["disk_items"] == 0:
            return []
        held = []
        for start in range(0, len(self.dataset), _SPOT_CHUNK):
            ids = np.arange(start, min(len(self.dataset), start + _SPOT_CHUNK), dtype=np.int64)
            held.extend(ids[np.asarray(self.store.locate(ids)) != 0].tolist())
            if len(held) >= _SPOT_CANDIDATES:
                break
        if len(held) <= count:
            return held
        return [held[round(k * (len(held) - 1) / (count - 1))] for k in range(count)] \
            if count > 1 else [held[len(held) // 2]]

    def __getstate__(self):
        state = dict(self.__dict__)
        # A worker reads by the positions it is given; the sampler (which may
        # hold an unpicklable torch.Generator) stays in the main process.
        state["sampler"] = None
        state["_inverses"] = {}
        return state


def _apart(dataset):
    """A shallow copy of `dataset` for the spot check's loads: what a
    Dataset sets on its first use (a handle opened lazily in __getitem__:
    h5py, LMDB) is set on the copy, which goes after the check, and not on
    the Dataset that DataLoader workers fork from. The copy has the same
    attributes in a dict of its own (no __getstate__: one that leaves state
    to worker_init_fn would give a copy that cannot load), so a wrapper's
    inner Dataset is the same object. A Dataset without a __dict__, or of a
    C type, is used itself."""
    try:
        twin = object.__new__(type(dataset))
        twin.__dict__.update(vars(dataset))
    except (TypeError, AttributeError):
        return dataset
    return twin


def _as_read(value):
    """value as a read from the store returns it (a tensor contiguous)."""
    if type(value) is torch.Tensor and not value.is_contiguous():
        return value.contiguous()
    return value


def _checked_index(name, index, size):
    """An index as ds[index] takes it: an int in [0, size) (a PlannedIndex
    kept as it is, for its position), a numpy integer, or a 0-d integer
    tensor (a Subset's indices from torch.randperm)."""
    if isinstance(index, PlannedIndex):
        return index if 0 <= index < size else check_index(name, int(index), size)
    if isinstance(index, torch.Tensor) and index.ndim == 0 and \
            not (index.is_floating_point() or index.is_complex() or index.dtype == torch.bool):
        index = index.item()
    return check_index(name, index, size)
