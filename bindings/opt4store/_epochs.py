"""A PlannedSampler's plan, recorded one epoch at a time.

EpochRecorder gives a base sampler's epochs in order, each as an int64
array. The common torch samplers have fast paths that make the same calls
on the same generator as their own __iter__ (torch 1.13 and 2.x), without
a Python int per index:
  RandomSampler (its exact type, generator set): torch.randperm per epoch
      (torch.randint in chunks of 32 with replacement), as __iter__ draws;
  SequentialSampler: arange;
  DistributedSampler: its permutation from seed + epoch, padded or cut,
      then every num_replicas-th from rank.
Any other sampler is iterated, one epoch at a time (set_epoch(e) first
where it has one). Recording an epoch advances the sampler's generator as
iterating it would, so epochs must be recorded in order, and a generator
the caller also draws from between epochs gives another order than
recording them all up front did (PlannedSampler records ahead of use).

PlanWindow holds the recorded epochs that are still of use: a lookup by
plan position that says "unknown" (None) for an epoch not held here.
"""

import math
import operator

import numpy as np
import torch
import torch.utils.data

from ._cluster_plan import search
from ._errors import InvalidArgumentError

# Chunk of RandomSampler's draws with replacement (its __iter__ draws 32 at a time).
_REPLACEMENT_CHUNK = 32


def _fast_path(sampler):
    """The name of the fast path for `sampler`, or None to iterate it."""
    kind = type(sampler)
    if kind is torch.utils.data.RandomSampler and \
            isinstance(getattr(sampler, "generator", None), torch.Generator):
        return "random"
    if kind is torch.utils.data.SequentialSampler:
        return "sequential"
    if kind is torch.utils.data.DistributedSampler:
        return "distributed"
    return None


def _random_epoch(sampler):
    n = len(sampler.data_source)
    count = sampler.num_samples
    g = sampler.generator
    if sampler.replacement:
        parts = [torch.randint(high=n, size=(_REPLACEMENT_CHUNK,), dtype=torch.int64, generator=g)
                 for _ in range(count // _REPLACEMENT_CHUNK)]
        parts.append(torch.randint(high=n, size=(count % _REPLACEMENT_CHUNK,), dtype=torch.int64,
                                   generator=g))
    else:
        parts = [torch.randperm(n, generator=g) for _ in range(count // n)]
        parts.append(torch.randperm(n, generator=g)[:count % n])  # drawn even when empty
    parts = [p for p in parts if len(p)]
    if len(parts) == 1:  # the common case: one permutation, not copied
        return parts[0].numpy()
    return torch.cat(parts).numpy() if parts else np.empty(0, np.int64)


def distributed_epoch(sampler, epoch, rank):
    """DistributedSampler's order for `rank` in `epoch`, as its __iter__
    computes it."""
    return np.ascontiguousarray(_distributed_indices(sampler, epoch)[rank::sampler.num_replicas])


def _distributed_indices(sampler, epoch):
    """DistributedSampler's indices of `epoch`, for every rank: rank r
    takes every num_replicas-th from r on."""
    n = len(sampler.dataset)
    if sampler.shuffle:
        g = torch.Generator()
        g.manual_seed(sampler.seed + epoch)
        indices = torch.randperm(n, generator=g).numpy().astype(np.int64, copy=False)
    else:
        indices = np.arange(n, dtype=np.int64)
    total = sampler.total_size
    if not sampler.drop_last:
        padding = total - len(indices)
        if padding > 0:
            indices = np.concatenate(
                [indices, np.tile(indices, math.ceil(padding / len(indices)))[:padding]])
    return indices[:total]


def _iterated_epoch(sampler):
    """Iterates any sampler, checking that it yields integer indices."""
    seen = [0]

    def index(value):
        try:
            i = operator.index(value)
        except TypeError:
            raise InvalidArgumentError(
                f"the sampler yielded {value!r} ({type(value).__name__}) at index {seen[0]} of "
                "an epoch; a sampler yields integer dataset indices") from None
        seen[0] += 1
        return i

    return np.fromiter(map(index, sampler), dtype=np.int64)


class EpochRecorder:
    """Records `sampler`'s epochs in order (see the module's docstring)."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.kind = _fast_path(sampler)
        self.next_epoch = 0  # the epoch record() gives next

    def record(self):
        """The next epoch's indices (int64, may be empty)."""
        epoch = self.next_epoch
        sampler = self.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        if self.kind == "random":
            ids = _random_epoch(sampler)
        elif self.kind == "sequential":
            ids = np.arange(len(sampler.data_source), dtype=np.int64)
        elif self.kind == "distributed":
            ids = distributed_epoch(sampler, epoch, sampler.rank)
        else:
            ids = _iterated_epoch(sampler)
        self.next_epoch = epoch + 1
        return ids


def rank_epoch(sampler, rank, epoch):
    """Rank `rank`'s order in `epoch` of a DistributedSampler-like sampler
    (num_replicas and rank): computed for DistributedSampler, else a copy
    with that rank is iterated (the order must follow from rank and epoch)."""
    if _fast_path(sampler) == "distributed":
        return distributed_epoch(sampler, epoch, rank)
    import copy
    other = copy.copy(sampler)
    other.rank = rank
    if hasattr(other, "set_epoch"):
        other.set_epoch(epoch)
    return _iterated_epoch(other)


def all_ranks_epoch(sampler, world, epoch):
    """int64 [world, reads a rank]: every rank's order in `epoch` (as
    rank_epoch gives them; DistributedSampler's permutation drawn once)."""
    if _fast_path(sampler) == "distributed":
        return _distributed_indices(sampler, epoch).reshape(-1, sampler.num_replicas).T
    parts = [np.asarray(rank_epoch(sampler, r, epoch), dtype=np.int64) for r in range(world)]
    if len({len(p) for p in parts}) > 1:
        raise ValueError(f"the ranks' orders of epoch {epoch} have {[len(p) for p in parts]} "
                         "indices: a cluster store needs equal epoch lengths")
    return np.stack(parts) if parts else np.empty((0, 0), np.int64)


class PlanWindow:
    """The epochs of one rank's plan held in this process (uint32 arrays:
    indices are below 2^32, and half the bytes of int64), looked up by the
    store's positions: own position i (epoch i // epoch_length) is store
    position i * stride + offset (stride local ranks sharing a store; else
    1 and 0). What CachedDataset's drift checks and lost-position recovery
    read; a DataLoader worker gets a copy of the epochs held when it starts."""

    def __init__(self, epoch_length, epochs):
        self.epoch_length = epoch_length
        self.epochs = epochs
        self.stride, self.offset = 1, 0
        self.positions = None  # a cluster store's: own read i at positions[i]
        self._ids = {}    # epoch -> int64 array
        self._views = {}  # epoch -> memoryview (indexes to a Python int fast)

    def put(self, epoch, ids):
        self._ids[epoch] = ids
        self._views[epoch] = memoryview(ids)

    def drop_before(self, epoch):
        for e in [e for e in self._ids if e < epoch]:
            del self._ids[e], self._views[e]

    def clear(self):
        self._ids.clear()
        self._views.clear()

    def epoch_ids(self, epoch):
        """Epoch `epoch`'s indices (uint32), or None when not held."""
        return self._ids.get(epoch)

    def held(self):
        """The epochs held, in order."""
        return sorted(self._ids)

    def __len__(self):
        """Store positions the plan spans."""
        if self.positions is not None:
            return int(self.positions[-1]) + 1 if len(self.positions) else 0
        return self.epochs * self.epoch_length * self.stride

    def planned(self, position):
        """The index the plan reads at store `position`: -1 where this rank
        reads nothing (another local rank's position), None where the epoch
        is not held here (unknown; past the plan too: a worker's copy does
        not see the plan grow, PlannedSampler._grow)."""
        if self.positions is not None:
            i = int(search(self.positions, position))
            r = 0 if i < len(self.positions) and int(self.positions[i]) == position else 1
        else:
            i, r = divmod(int(position) - self.offset, self.stride)
        if r != 0 or i < 0:
            return -1
        if i >= self.epochs * self.epoch_length:
            return None
        epoch, k = divmod(i, self.epoch_length)
        view = self._views.get(epoch)
        return None if view is None else view[k]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_views"] = {}  # memoryviews do not pickle
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views = {e: memoryview(ids) for e, ids in self._ids.items()}
