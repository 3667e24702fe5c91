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
    """

    def __init__(self, dataset, store, sampler=None):
        self.dataset = dataset
        self.store = store
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
        position = getattr(index, "position", None)
        if position is None:
            position = self._guess_position(index)
        elif self._plan is not None and (position >= len(self._plan) or
                                         self._plan[position] != index):
            self._drift(index, position)
        result = self.store.get(position, index)
        if result is not None:
            return result
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
        if isinstance(self._plan, memoryview):
            state["_plan"] = self._plan.obj  # memoryviews do not pickle
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if isinstance(self._plan, np.ndarray):
            self._plan = memoryview(self._plan)
