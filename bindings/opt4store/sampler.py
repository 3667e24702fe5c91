"""PlannedSampler: records any torch Sampler's order ahead of time."""

import copy

import numpy as np
import torch.utils.data

from . import _core
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


def _record(sampler, epochs):
    """The sampler's order for each epoch, calling set_epoch(e) where it exists."""
    orders = []
    for epoch in range(epochs):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        orders.append(np.fromiter((int(i) for i in sampler), dtype=np.int64))
    return orders


class _StorePlan:
    """One rank's plan as a store shared by the host's local ranks numbers
    it: host position i * stride + offset holds plan[i]; the other local
    ranks' positions read as -1 (never an index). Offers what CachedDataset's
    drift check needs, len() and [position], without the host-sized array."""

    def __init__(self, plan, stride, offset):
        self.plan, self.stride, self.offset = plan, stride, offset
        self._ids = memoryview(plan)  # indexes to a Python int

    def __len__(self):
        return len(self._ids) * self.stride

    def __getitem__(self, position):
        i, r = divmod(int(position) - self.offset, self.stride)
        return self._ids[i] if r == 0 and 0 <= i < len(self._ids) else -1

    def __getstate__(self):
        return (self.plan, self.stride, self.offset)  # memoryviews do not pickle

    def __setstate__(self, state):
        self.__init__(*state)


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

    A state_dict carries the plan's fingerprint (``self.fingerprint``), and
    loading it into a sampler whose recorded plan differs is refused. The
    fingerprint is the C++ PlanFingerprint (64-bit FNV-1a over the plan's
    length and ids, 16 hex digits; engine/include/opt4store/plan.h), the one
    the store's description of an explicit plan carries. State_dicts saved
    before opt4store took it (their fingerprint is a 40-digit SHA-1) do not
    load: ``load_state_dict`` raises InvalidArgumentError saying so.

    DDP: over a DistributedSampler, each rank records and yields its own
    share as above. When a CachedDataset binds it to a store shared by the
    host's local ranks (``Store(..., shared="local")``), the plan positions
    become host positions: this rank's i-th read (i = epoch * len + index)
    is at ``i * local_world_size + local_rank``, the order the host's store
    sees while the ranks advance in lockstep. Local rank 0, which plans the
    shared store, records the other local ranks' orders from copies of the
    DistributedSampler with their ``rank`` (ranks node * local_world_size
    + r), so the base sampler must give each rank's order deterministically
    from (rank, epoch), as DistributedSampler does with its seed.
    """

    def __init__(self, sampler, epochs):
        if epochs < 1:
            raise InvalidArgumentError("epochs must be at least 1")
        self.sampler = sampler
        self.epochs = int(epochs)
        # An unseeded random sampler draws from torch's global generator,
        # which a restarted process does not repeat: give it a generator with
        # a seed drawn here, and keep the seed in the state, so that a resume
        # records the same order.
        self.seed = None
        if getattr(sampler, "generator", False) is None:
            self.seed = int(torch.empty((), dtype=torch.int64).random_().item())
            sampler.generator = torch.Generator().manual_seed(self.seed)
        orders = _record(sampler, self.epochs)
        lengths = {len(o) for o in orders}
        if len(lengths) != 1:
            raise InvalidArgumentError(
                f"the sampler's epochs have different lengths {sorted(lengths)}; "
                "PlannedSampler needs a fixed epoch length")
        self.epoch_length = lengths.pop()
        self.plan = np.concatenate(orders) if orders else np.empty(0, np.int64)
        if len(self.plan) and self.plan.min() < 0:
            raise InvalidArgumentError("the sampler yielded a negative index")
        self.fingerprint = _core.plan_fingerprint(self.plan)
        self._epoch = 0
        self._start = 0
        self._yielded = 0
        self._taken_from = 0
        self._current_epoch = 0
        self._counted_by_loader = False  # take_epoch + note_yielded: exact counts
        self._stores = []
        # Store positions: own position * _stride + _offset (host positions
        # of a store shared by _stride local ranks; else 1 and 0).
        self._stride = 1
        self._offset = 0

    def __len__(self):
        return self.epoch_length

    def __iter__(self):
        base, start = self._begin_epoch()
        self._counted_by_loader = False
        ids = self.plan[base:base + self.epoch_length].tolist()
        stride, offset = self._stride, self._offset
        for i in range(start, self.epoch_length):
            index = PlannedIndex(ids[i])
            index.position = (base + i) * stride + offset
            self._yielded = i + 1
            yield index

    def take_epoch(self):
        """What the next iter() yields, as arrays, for a loader that reads
        them in bulk (opt4store.DataLoader): (store positions as uint64,
        indices as int64) from the resume index to the epoch's end. Advances
        the sampler as iter() does; ``note_yielded(n)`` then says how many of
        them the caller has handed out (state_dict counts from it)."""
        base, start = self._begin_epoch()
        ids = self.plan[base + start:base + self.epoch_length]
        positions = np.arange(base + start, base + self.epoch_length, dtype=np.uint64)
        positions = positions * np.uint64(self._stride) + np.uint64(self._offset)
        self._taken_from = start
        self._counted_by_loader = True
        return positions, ids

    def set_epoch(self, epoch):
        """The next iter() reads recorded epoch ``epoch`` (as DDP loops call
        it before each epoch). The epoch the sampler is at (or resumes in,
        after load_state_dict) keeps its place; a later one starts at its
        beginning, and the epochs in between are never read (a bound store is
        planned from there, as after load_state_dict). An epoch already begun
        cannot be read again: the plan only goes forward."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
            raise TypeError(f"set_epoch: expected an int, got {type(epoch).__name__}")
        epoch = int(epoch)
        if epoch == self._epoch:
            return
        if epoch < self._epoch:
            raise InvalidArgumentError(
                f"set_epoch({epoch}): epoch {self._epoch - 1} was read already and the plan "
                f"only goes forward; the next epoch is {self._epoch} (to read an earlier "
                "one again, make a new PlannedSampler and Store.bind it)")
        if epoch >= self.epochs:
            raise InvalidArgumentError(
                f"set_epoch({epoch}): this PlannedSampler recorded {self.epochs} epochs "
                f"(0 to {self.epochs - 1}); create it with more epochs")
        self._epoch = epoch
        self._start = 0
        self._current_epoch = epoch
        self._yielded = 0
        for store in self._stores:
            self._plan_store(store)  # from the new start, as load_state_dict does

    def note_yielded(self, count):
        """``count`` of the last take_epoch()'s indices have been handed out."""
        self._yielded = self._taken_from + int(count)

    def _begin_epoch(self):
        """Starts the next recorded epoch: (its first plan index, the index in
        it to resume at)."""
        epoch = self._epoch
        if epoch >= self.epochs:
            raise InvalidArgumentError(
                f"PlannedSampler recorded {self.epochs} epochs and all were used; "
                "create it with more epochs")
        start, self._start = self._start, 0
        self._epoch = epoch + 1
        self._current_epoch = epoch
        self._yielded = start
        base = epoch * self.epoch_length
        for store in self._stores:
            # Unread positions before here (drop_last's tail) are not read now.
            store.begin_epoch((base + start) * self._stride + self._offset)
        return base, start

    def state_dict(self, consumed=None):
        """Where to resume: the epoch in progress and the samples of it done.
        Without ``consumed=``, mid-epoch, the indices handed out count as
        done: refused when a bound store did not read them in this process
        (DataLoader workers read them, and fetch ahead of the loop)."""
        if consumed is None:
            self._check_count_is_exact()
        done = self._yielded if consumed is None else int(consumed)
        epoch = self._current_epoch if self._epoch > 0 else 0
        if done >= self.epoch_length:
            epoch, done = epoch + 1, 0
        return {"epoch": epoch, "index": done, "epochs": self.epochs,
                "epoch_length": self.epoch_length, "fingerprint": self.fingerprint,
                "seed": self.seed, "rank": getattr(self.sampler, "rank", None)}

    def _plan_with_seed(self, seed):
        """(plan, seed): this sampler's order recorded again with `seed` when
        both this sampler and the saved one were unseeded (they drew
        different seeds); else the plan as it is."""
        if self.seed is None or not isinstance(seed, int) or seed == self.seed:
            return self.plan, self.seed
        other = copy.copy(self.sampler)
        other.generator = torch.Generator().manual_seed(seed)
        plan = np.concatenate(_record(other, self.epochs))
        if len(plan) != len(self.plan):
            return self.plan, self.seed
        return plan, seed

    def _fingerprint_as_saved(self, state, plan):
        """The fingerprint this sampler's order has as `state` was saved: its
        first state["epochs"] epochs (a state saved by a sampler that
        recorded fewer), recorded for state["rank"] when that is another
        rank of the same DistributedSampler."""
        try:
            epochs = int(state.get("epochs", self.epochs))
        except (TypeError, ValueError):
            return self.fingerprint
        if not 0 < epochs <= self.epochs:
            return self.fingerprint
        rank = state.get("rank")
        if rank is not None and rank != getattr(self.sampler, "rank", None) and \
                hasattr(self.sampler, "num_replicas") and isinstance(rank, int) and \
                0 <= rank < self.sampler.num_replicas:
            other = copy.copy(self.sampler)
            other.rank = rank
            return _core.plan_fingerprint(np.concatenate(_record(other, epochs)))
        if epochs == self.epochs and plan is self.plan:
            return self.fingerprint
        return _core.plan_fingerprint(plan[:epochs * self.epoch_length])

    def _check_count_is_exact(self):
        if self._counted_by_loader or not self._stores or \
                not 0 < self._yielded < self.epoch_length:
            return
        last = (self._current_epoch * self.epoch_length + self._yielded - 1) * self._stride + \
            self._offset
        if any(store.last_position_read() >= last for store in self._stores):
            return
        raise InvalidArgumentError(
            f"state_dict() without consumed=: {self._yielded} indices of epoch "
            f"{self._current_epoch} were handed out, but not read in this process: a "
            "DataLoader's workers read them and fetch batches ahead of the training loop, so "
            "resuming there would skip samples. Pass consumed= (the samples the loop has "
            "processed in this epoch), or use opt4store.DataLoader, whose state_dict() "
            "counts what it yielded")

    def load_state_dict(self, state):
        """The next iter() resumes at state's epoch and index. The state may
        come from another rank of the same DistributedSampler (one checkpoint
        for every rank: each resumes its own order at the same place), from
        a sampler that recorded fewer epochs of the same order (this one
        plans the rest), or from an unseeded random sampler (its seed is in
        the state: this one records that order again)."""
        if not isinstance(state, dict):
            raise InvalidArgumentError(
                f"load_state_dict: expected a PlannedSampler state dict, got "
                f"{type(state).__name__}")
        plan, seed = self._plan_with_seed(state.get("seed"))
        theirs = state.get("fingerprint")
        if theirs != self._fingerprint_as_saved(state, plan):
            if isinstance(theirs, str) and len(theirs) == 40:
                raise InvalidArgumentError(
                    "this state_dict was saved by an older opt4store, whose plan fingerprint "
                    f"was a SHA-1 ({theirs[:12]}...); plans are now fingerprinted with "
                    f"PlanFingerprint ({self.fingerprint}), so it cannot be checked against "
                    "this sampler's plan and does not load (see PlannedSampler's docstring)")
            raise InvalidArgumentError(
                f"this state belongs to another plan (fingerprint {theirs!r}, this sampler's "
                f"is {self.fingerprint!r}): a different sampler, seed or epoch count")
        if seed != self.seed:
            # In place: CachedDatasets hold views of the plan.
            self.plan[:] = plan
            self.seed = seed
            self.sampler.generator = torch.Generator().manual_seed(seed)
            self.fingerprint = _core.plan_fingerprint(self.plan)
        self._epoch = int(state["epoch"])
        self._start = int(state["index"])
        self._current_epoch = self._epoch
        self._yielded = self._start
        for store in self._stores:
            self._plan_store(store)

    # ---- what Store.bind and CachedDataset call

    def position(self):
        """The plan position the next iter() starts at."""
        return self._epoch * self.epoch_length + self._start

    def attach_store(self, store):
        """Plans ``store`` with this sampler from position() on, now and at
        every load_state_dict (Store.bind calls it). A store shared by a
        host's local ranks switches the sampler to host positions."""
        layout = store.local_layout
        if layout is not None:
            self._share(*layout)
        self._plan_store(store)
        if store not in self._stores:
            self._stores.append(store)

    def _plan_store(self, store):
        """Gives the store this plan from position(), unless another process
        plans it (a reader of a shared store)."""
        if not store.is_owner:
            return
        if self._stride == 1:
            store.set_plan(self.plan, self.epoch_length, self.position())
        else:
            store.set_plan(self._host_plan_array(), self.epoch_length * self._stride,
                           self.position() * self._stride)

    def check_shareable(self, local_rank, local_world_size):
        """Raises unless this sampler can drive a store shared by the host's
        local ranks."""
        if local_world_size == 1:
            return
        num_replicas = getattr(self.sampler, "num_replicas", None)
        rank = getattr(self.sampler, "rank", None)
        if num_replicas is None or rank is None:
            raise InvalidArgumentError(
                f"a store shared by {local_world_size} local ranks needs a PlannedSampler over "
                "a DistributedSampler (a sampler with num_replicas and rank), to know every "
                f"local rank's order; got {type(self.sampler).__name__}")
        if num_replicas % local_world_size or rank % local_world_size != local_rank:
            raise InvalidArgumentError(
                f"the DistributedSampler's rank {rank} of {num_replicas} is not local rank "
                f"{local_rank} of {local_world_size}: a host's ranks must be contiguous "
                "(rank = node * local_world_size + local_rank)")

    def _share(self, local_rank, local_world_size):
        """Yields host positions of a store shared by local_world_size local ranks."""
        self.check_shareable(local_rank, local_world_size)
        layout = (local_world_size, local_rank)
        if self._stores and (self._stride, self._offset) != layout:
            raise InvalidArgumentError(
                "this PlannedSampler already drives a store with other positions; use one "
                "sampler per store layout (shared or not)")
        self._stride, self._offset = layout

    @property
    def store_layout(self):
        """(stride, offset): this sampler's i-th read is at store position
        i * stride + offset ((1, 0) unless a store is shared by local ranks)."""
        return self._stride, self._offset

    def store_plan(self):
        """The plan indexed by the store's positions (for drift checks)."""
        if self._stride == 1:
            return self.plan
        return _StorePlan(self.plan, self._stride, self._offset)

    def _host_plan_array(self):
        """The host's plan: every local rank's order, interleaved read by read.
        Recorded anew at each call (the store keeps its own copy), so that
        the sampler does not hold local_world_size plans."""
        local_world = self._stride
        node = self.sampler.rank // local_world
        host = np.empty((len(self.plan), local_world), dtype=np.int64)
        for r in range(local_world):
            if r == self._offset:
                host[:, r] = self.plan
                continue
            other = copy.copy(self.sampler)
            other.rank = node * local_world + r
            orders = _record(other, self.epochs)
            if any(len(o) != self.epoch_length for o in orders):
                raise InvalidArgumentError(
                    f"rank {other.rank}'s epochs have lengths {sorted({len(o) for o in orders})}, "
                    f"rank {self.sampler.rank}'s {self.epoch_length}: the local ranks of a "
                    "shared store need equal epoch lengths")
            host[:, r] = np.concatenate(orders)
        return host.reshape(-1)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_stores"] = []  # a worker's copy does not re-plan the owner's store
        return state
