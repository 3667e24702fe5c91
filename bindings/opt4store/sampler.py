"""PlannedSampler: records any torch Sampler's order ahead of time."""

import hashlib

import numpy as np
import torch.utils.data

from ._errors import InvalidArgumentError


def _make_index(value, position):
    index = PlannedIndex(value)
    index.position = position
    return index


class PlannedIndex(int):
    """An index that also knows its position in the plan (epoch * len + i).
    It is an int everywhere else, so plain datasets accept it."""

    def __reduce__(self):
        return (_make_index, (int(self), self.position))


class PlannedSampler(torch.utils.data.Sampler):
    """Wraps a Sampler and records its order for ``epochs`` epochs up front,
    calling ``set_epoch(e)`` on samplers that have it (DistributedSampler).
    Each ``iter(sampler)`` yields the next recorded epoch, as
    ``PlannedIndex`` values. Every epoch must have the same length.

    ``state_dict()`` / ``load_state_dict()`` resume exactly in the middle of
    an epoch. The sampler counts the indices it handed to the DataLoader; a
    loader with workers fetches a few batches ahead of the training loop, so
    pass ``consumed=`` (samples the loop has processed in this epoch) for an
    exact count.
    """

    def __init__(self, sampler, epochs):
        if epochs < 1:
            raise InvalidArgumentError("epochs must be at least 1")
        self.sampler = sampler
        self.epochs = int(epochs)
        orders = []
        for epoch in range(self.epochs):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            orders.append(np.fromiter((int(i) for i in sampler), dtype=np.int64))
        lengths = {len(o) for o in orders}
        if len(lengths) != 1:
            raise InvalidArgumentError(
                f"the sampler's epochs have different lengths {sorted(lengths)}; "
                "PlannedSampler needs a fixed epoch length")
        self.epoch_length = lengths.pop()
        self.plan = np.concatenate(orders) if orders else np.empty(0, np.int64)
        if len(self.plan) and self.plan.min() < 0:
            raise InvalidArgumentError("the sampler yielded a negative index")
        self.fingerprint = hashlib.sha1(self.plan.tobytes()).hexdigest()
        self._epoch = 0
        self._start = 0
        self._yielded = 0
        self._current_epoch = 0
        self._stores = []

    def __len__(self):
        return self.epoch_length

    def __iter__(self):
        epoch = self._epoch
        if epoch >= self.epochs:
            raise InvalidArgumentError(
                f"PlannedSampler recorded {self.epochs} epochs and all were used; "
                "create it with more epochs")
        start, self._start = self._start, 0
        self._epoch = epoch + 1
        self._current_epoch = epoch
        base = epoch * self.epoch_length
        ids = self.plan[base:base + self.epoch_length].tolist()
        self._yielded = start
        for i in range(start, self.epoch_length):
            index = PlannedIndex(ids[i])
            index.position = base + i
            self._yielded = i + 1
            yield index

    def state_dict(self, consumed=None):
        """Where to resume: the epoch in progress and the samples of it done."""
        done = self._yielded if consumed is None else int(consumed)
        epoch = self._current_epoch if self._epoch > 0 else 0
        if done >= self.epoch_length:
            epoch, done = epoch + 1, 0
        return {"epoch": epoch, "index": done, "epochs": self.epochs,
                "epoch_length": self.epoch_length, "fingerprint": self.fingerprint}

    def load_state_dict(self, state):
        """The next iter() resumes at state's epoch and index."""
        if state.get("fingerprint") != self.fingerprint:
            raise InvalidArgumentError(
                "this state belongs to another plan (a different sampler, seed or epoch count)")
        self._epoch = int(state["epoch"])
        self._start = int(state["index"])
        self._current_epoch = self._epoch
        self._yielded = self._start
        for store in self._stores:
            store._set_plan(self.plan, self.epoch_length, self.position())

    def position(self):
        """The plan position the next iter() starts at."""
        return self._epoch * self.epoch_length + self._start

    def _attach_store(self, store):
        store._set_plan(self.plan, self.epoch_length, self.position())
        if store not in self._stores:
            self._stores.append(store)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_stores"] = []  # a worker's copy does not re-plan the owner's store
        return state
