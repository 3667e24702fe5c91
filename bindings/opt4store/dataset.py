"""CachedDataset: a Dataset whose items come from an opt4store Store."""

import warnings

import numpy as np
import torch
import torch.utils.data

from .store import NO_POSITION


class CachedDataset(torch.utils.data.Dataset):
    """``CachedDataset(dataset, store, sampler)``: ``ds[i]`` equals
    ``dataset[i]``, served from the store when it holds it; on a miss the
    dataset is called once and the value stored. Give the DataLoader the same
    ``sampler`` (a PlannedSampler): its indices carry their plan positions,
    which drive eviction and prefetch.

    A plain int index (no position) works too: in the main process it is
    taken as the next plan position, in a worker as unplanned. An index the
    plan did not predict at that position is drift: the value is still
    right, the store counts it, and a warning is issued once.

    ``transform=``: a callable applied to every value read, after the cache
    (random augmentation belongs here: the store keeps the untransformed
    value, and each read transforms it anew). ``__getitems__`` reads a whole
    batch with one call into the store (torch's DataLoader calls it for a
    batch), loading only the misses from ``dataset``.
    """

    def __init__(self, dataset, store, sampler=None, transform=None):
        if transform is not None and not callable(transform):
            raise TypeError(f"transform= must be callable, got {type(transform).__name__}")
        self.dataset = dataset
        self.store = store
        self.sampler = sampler
        self.transform = transform
        store.bind(len(dataset), sampler)
        # A memoryview indexes to a Python int in tens of nanoseconds. The
        # plan as the store numbers positions: host positions when the store
        # is shared by a host's local ranks (a view, see PlannedSampler).
        plan = sampler.store_plan() if sampler is not None else None
        self._plan = memoryview(plan) if isinstance(plan, np.ndarray) else plan
        self._cursor = sampler.position() if sampler is not None else 0
        self._stride, self._offset = sampler.store_layout if sampler is not None else (1, 0)
        self._warned_drift = False

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        value = self.load(index)
        return value if self.transform is None else self.transform(value)

    def __getitems__(self, indices):
        """The values of a batch of indices, read from the store in one call;
        the misses are loaded from the dataset and stored."""
        values = self.load_batch([self._position(index) for index in indices], indices)
        if self.transform is not None:
            values = [self.transform(value) for value in values]
        return values

    def load_batch(self, positions, indices):
        """The untransformed values of (positions[i], indices[i]): read from
        the store a run of distinct indices at a time, each run's misses
        loaded and stored before the next run is read, so that an index
        repeated in a batch is loaded once, as reads one by one would."""
        values = []
        start = 0
        while start < len(indices):
            seen = set()
            end = start
            while end < len(indices) and int(indices[end]) not in seen:
                seen.add(int(indices[end]))
                end += 1
            run = self.store.get_batch(positions[start:end], indices[start:end])
            for k, value in enumerate(run):
                if value is None:
                    run[k] = self.load_miss(positions[start + k], indices[start + k])
            values.extend(run)
            start = end
        return values

    def load(self, index):
        """The untransformed value of ``index``: from the store, or loaded from
        the dataset and stored."""
        position = self._position(index)
        result = self.store.get(position, index)
        return result if result is not None else self.load_miss(position, index)

    def position_of(self, index):
        """The plan position of a read of ``index`` (NO_POSITION when unknown),
        as __getitem__ sees it (a plain int in the main process takes the
        next one)."""
        return self._position(index)

    def _position(self, index):
        position = getattr(index, "position", None)
        if position is None:
            return self._guess_position(index)
        if self._plan is not None and (position >= len(self._plan) or
                                       self._plan[position] != index):
            self._drift(index, position)
        return position

    def load_miss(self, position, index):
        """Loads ``index`` from the dataset and stores it for ``position``
        (a read that found nothing): the untransformed value."""
        value = self.dataset[int(index)]
        self.store.put(position, int(index), value)
        if type(value) is torch.Tensor and not value.is_contiguous():
            value = value.contiguous()  # as every later read returns it
        return value

    def _guess_position(self, index):
        if self._plan is None or torch.utils.data.get_worker_info() is not None:
            return NO_POSITION
        position = self._cursor * self._stride + self._offset
        self._cursor += 1
        if position >= len(self._plan) or self._plan[position] != index:
            self._drift(index, position)
        return position if position < len(self._plan) else NO_POSITION

    def _drift(self, index, position):
        if not self._warned_drift:
            self._warned_drift = True
            warnings.warn(
                f"opt4store: index {int(index)} at plan position {position} is not what the "
                "plan predicted (drift); values stay correct, but eviction and prefetch "
                "follow the plan. stats()['drift'] counts such reads.",
                RuntimeWarning, stacklevel=3)

    def __getstate__(self):
        state = dict(self.__dict__)
        # A worker reads by the positions it is given; the sampler (which may
        # hold an unpicklable torch.Generator) stays in the main process.
        state["sampler"] = None
        if isinstance(self._plan, memoryview):
            state["_plan"] = self._plan.obj  # memoryviews do not pickle
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if isinstance(self._plan, np.ndarray):
            self._plan = memoryview(self._plan)
