"""PlannedSampler: records any torch Sampler's order a few epochs ahead."""

import numbers
import warnings

import numpy as np
import torch.utils.data

from . import _core
from ._epochs import EpochRecorder, PlanWindow, rank_epoch
from ._checks import check_int
from ._errors import InvalidArgumentError, InvalidTypeError
from ._sampler_state import SavedPlace

# Epochs recorded past the one being read (at least): the store's planner
# runs into the next epoch before the sampler begins it, and the epoch
# after the one it plans holds every next read of a permutation epoch (OPT
# stays exact). Short epochs take more (PlannedSampler._ahead).
EPOCHS_AHEAD = 2
# How far the store's planner may run ahead of its readers: the largest
# prefetch_depth a store takes (ControlBlock::kRingSize / 4). The epochs
# recorded ahead span it and one epoch more.
PLANNER_REACH = 1 << 14
# A plan of at most this many reads (32 MiB as int64) is recorded whole at
# creation, as before lazy recording: the store knows every next read, and
# ``plan`` gives it. A longer one is recorded EPOCHS_AHEAD epochs ahead and
# lets epochs go once read.
WHOLE_PLAN_READS = 1 << 22


def _make_index(value, position):
    index = PlannedIndex(value)
    index.position = position
    return index


class PlannedIndex(int):
    """An index that also knows its position in the plan (epoch * len + i).
    It is an int everywhere else, so plain datasets accept it."""

    def __reduce__(self):
        return (_make_index, (int(self), self.position))


class PlannedSampler(SavedPlace, torch.utils.data.Sampler):
    """Wraps a Sampler and plans its order for ``epochs`` epochs, calling
    ``set_epoch(e)`` on samplers that have it (DistributedSampler). Each
    ``iter(sampler)`` yields the next epoch, as ``PlannedIndex`` values;
    past ``epochs`` the plan grows, with a warning (_grow). Every epoch must
    have the same length (an epoch that differs raises InvalidArgumentError
    when it is recorded).

    Epochs are recorded lazily, in order, as int64 arrays: at creation the
    first 1 + A, and when the sampler begins epoch e, those through e + A
    (A = EPOCHS_AHEAD, or for epochs shorter than PLANNER_REACH enough to
    span it and one epoch more), each appended to the bound stores' open plan
    then (Store.append_plan), an epoch and more before readers reach it. So
    the store always knows the epoch after the one it plans: with a
    permutation per epoch every item's next read is known and OPT is exact,
    as with the whole plan. Where a next read lies further than the epochs
    known (sampling with replacement, say), OPT ranks the item as read
    again after everything known until the epoch that holds the read is
    appended (see next_use.h). RandomSampler, SequentialSampler and
    DistributedSampler are recorded without a Python int per index; other
    samplers are iterated (opt4store/_epochs.py). A plan of more than
    WHOLE_PLAN_READS reads lets each epoch go after the next one has
    begun. A shorter one is recorded whole at creation, as before, so its
    store knows every next read (exact OPT with any sampler), and ``plan``
    gives it. Recording
    advances the base sampler's generator as iterating it does, ahead of
    use: draw from that generator elsewhere and the order changes. A base
    sampler without a generator (an unseeded RandomSampler) gets one with a
    seed drawn once, here, from torch's global generator (so that a resume
    can record the same order): its order is not the one torch would give
    under torch.manual_seed, and the global stream differs afterwards. A
    DataLoader worker holds the epochs recorded when it starts (the current
    one and those ahead); ``persistent_workers=True`` with a long plan keeps
    the first ones only, so in later epochs those workers skip the drift
    check and cannot recover the position of a plain int index.

    ``state_dict()`` / ``load_state_dict()`` resume exactly in the middle of
    an epoch. The sampler counts the indices it handed to the DataLoader; a
    loader with workers fetches a few batches ahead of the training loop, so
    pass ``consumed=`` (samples the loop has processed in this epoch,
    counted from the epoch's start: after a resume at index N, N plus those
    processed since) for an exact count, or take the state after
    ``set_epoch`` of the next epoch.

    A state_dict carries the plan's fingerprint (``self.fingerprint``), and
    loading it into a sampler whose plan differs is refused; one saved with
    more epochs (a run whose plan grew) grows this plan to them. The
    fingerprint is the C++ PlanFingerprint (64-bit FNV-1a over the length
    and ids, 16 hex digits;
    engine/include/opt4store/plan.h) of the plan's first epoch: hashing
    every epoch would record the whole run, and the first epoch fixes the
    base sampler's order (its seed, rank and length). State_dicts saved
    before opt4store took it (their fingerprint is a 40-digit SHA-1) do not
    load: ``load_state_dict`` raises InvalidArgumentError saying so; nor
    do those whose fingerprint covered every epoch (before lazy recording).

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
        self.epochs = check_int("epochs", epochs, minimum=1)
        if isinstance(sampler, (str, bytes, bytearray)) or not isinstance(
                sampler, torch.utils.data.Sampler) and not (
                hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
            raise InvalidTypeError(
                f"sampler: expected a torch Sampler (or an iterable with a length), got "
                f"{type(sampler).__name__}")
        self.sampler = sampler
        # An unseeded random sampler draws from torch's global generator,
        # which a restarted process does not repeat: give it a generator with
        # a seed drawn here, and keep the seed in the state, so that a resume
        # records the same order.
        self.seed = None
        if getattr(sampler, "generator", False) is None:
            self.seed = int(torch.empty((), dtype=torch.int64).random_().item())
            sampler.generator = torch.Generator().manual_seed(self.seed)
        self._recorder = EpochRecorder(sampler)
        first = self._recorder.record()
        self.epoch_length = len(first)
        self._ahead = max(EPOCHS_AHEAD, 1 + -(-PLANNER_REACH // max(1, self.epoch_length)))
        self._window = PlanWindow(self.epoch_length, self.epochs)
        self._whole = None  # the whole plan, once `plan` built it
        self._accept(0, first)
        self.fingerprint = _core.plan_fingerprint(first)
        self._epoch = 0
        self._start = 0
        self._yielded = 0
        self._taken_from = 0      # the index the epoch in progress began at
        self._current_epoch = 0
        self._counted_by_loader = False  # take_epoch or note_yielded: exact counts
        self._grew = False  # _grow warned
        self._stores = []
        # Stores read through that plan themselves (a cluster store's), for
        # _check_count_is_exact.
        self._read_through = []
        # Store positions: own position * _stride + _offset (host positions
        # of a store shared by _stride local ranks; else 1 and 0).
        self._stride = 1
        self._offset = 0
        # A cluster store's positions (opt4store/cluster.py): own read i at
        # _positions[i]; stride and offset are then 0. _replan(position())
        # re-plans it after load_state_dict.
        self._positions = None
        self._replan = None
        self._record_ahead()

    # ---- the recorded epochs

    def _accept(self, epoch, ids):
        """Checks a newly recorded epoch and holds it."""
        if len(ids) != self.epoch_length:
            raise InvalidArgumentError(
                f"the sampler's epoch {epoch} has {len(ids)} indices and epoch 0 had "
                f"{self.epoch_length}; PlannedSampler needs a fixed epoch length")
        if len(ids) and ids.min() < 0:
            raise InvalidArgumentError("the sampler yielded a negative index")
        if len(ids) and ids.max() > 0xFFFFFFFF:
            raise InvalidArgumentError(
                f"the sampler yielded index {int(ids.max())}; indices are below 2^32")
        self._window.put(epoch, ids.astype(np.uint32))

    def _record_ahead(self, epoch=None, append=True, through=0):
        """Records through _ahead epochs past `epoch` (default: the
        next iter()'s) and through epoch `through`, appending each new one
        to the bound stores (unless `append` is false: the caller plans
        them anew); a long plan lets go of epochs before the one before
        `epoch`. A short plan (at most WHOLE_PLAN_READS) is recorded whole."""
        epoch = self._epoch if epoch is None else epoch
        if self._keeps_whole():
            last, keep_from = self.epochs - 1, 0
        else:
            last = min(max(epoch + self._ahead, through), self.epochs - 1)
            keep_from = max(0, min(epoch, self.epochs - 1) - 1)
        while self._recorder.next_epoch <= last:
            e = self._recorder.next_epoch
            self._window.drop_before(keep_from)
            ids = self._recorder.record()
            self._accept(e, ids)
            for store in self._stores if append else ():
                if store.is_owner:
                    store.append_plan(ids if self._stride == 1 else self._host_epoch(e))
        self._window.drop_before(keep_from)

    def _grow(self, epochs, what):
        """Plans `epochs` epochs instead of self.epochs, for a loop that runs
        past them (`what`: the call): the run goes on, in the base sampler's
        order, and warns once; the caller plans the bound stores anew. A
        cluster store's plan is fixed for the run: refused there."""
        if self._positions is not None:
            raise InvalidArgumentError(
                f"{what}: this PlannedSampler recorded {self.epochs} epochs and drives a "
                "cluster store, whose plan is fixed for the run; create it with more epochs")
        if not self._grew:
            self._grew = True
            warnings.warn(
                f"opt4store: {what} is past the {self.epochs} epochs this PlannedSampler was "
                f"made for: it now plans {epochs}. Each iter() of it (or of a loader over it: "
                "next(iter(loader)) too) begins an epoch; give epochs= every epoch the loop "
                "runs, so that the store plans them from the start", RuntimeWarning,
                stacklevel=4)
        self.epochs = self._window.epochs = epochs
        self._whole = None

    def _keeps_whole(self):
        return self.epochs * self.epoch_length <= WHOLE_PLAN_READS

    def epoch_ids(self, epoch):
        """Epoch ``epoch``'s indices (uint32), recording up to it if need be.
        Raises InvalidArgumentError for an epoch a long plan let go."""
        epoch = check_int("epoch", epoch)
        if not 0 <= epoch < self.epochs:
            raise InvalidArgumentError(f"epoch {epoch}: the plan has epochs 0 to {self.epochs - 1}")
        if epoch >= self._recorder.next_epoch:
            # Kept from the epoch in progress on: iter() and readers need them.
            self._record_ahead(through=epoch)
        ids = self._window.epoch_ids(epoch)
        if ids is None:
            raise InvalidArgumentError(
                f"epoch {epoch} of this plan was read and let go: a plan of more than "
                f"{WHOLE_PLAN_READS} reads is held a few epochs at a time")
        return ids

    @property
    def plan(self):
        """The whole plan, every epoch's indices in one int64 array (records
        the epochs not yet recorded). For tests and inspection: a plan of
        more than WHOLE_PLAN_READS reads is never held whole, and this
        raises InvalidArgumentError; use epoch_ids(e)."""
        if self._whole is None:
            if not self._keeps_whole():
                raise InvalidArgumentError(
                    f"this plan of {self.epochs * self.epoch_length} reads is recorded a few "
                    "epochs at a time and never held whole; use epoch_ids(epoch)")
            self._whole = np.concatenate(
                [self.epoch_ids(e) for e in range(self.epochs)]).astype(np.int64)
        return self._whole

    def __len__(self):
        return self.epoch_length

    def __iter__(self):
        base, start = self._begin_epoch()
        self._counted_by_loader = False
        ids = self._window.epoch_ids(base // self.epoch_length) if self.epoch_length else []
        stride, offset, positions = self._stride, self._offset, self._positions
        chunk = 4096  # Python ints a chunk at a time, not an epoch's worth
        for first in range(start, self.epoch_length, chunk):
            at = positions[base + first:base + first + chunk].tolist() \
                if positions is not None else None
            for k, value in enumerate(ids[first:first + chunk].tolist(), first):
                index = PlannedIndex(value)
                index.position = (base + k) * stride + offset if at is None else at[k - first]
                self._yielded = k + 1
                yield index

    def take_epoch(self):
        """What the next iter() yields, as arrays, for a loader that reads
        them in bulk (opt4store.DataLoader): (store positions as uint64,
        indices as int64) from the resume index to the epoch's end. Advances
        the sampler as iter() does; ``note_yielded(n)`` then says how many of
        them the caller has handed out (state_dict counts from it)."""
        base, start = self._begin_epoch()
        ids = self._window.epoch_ids(base // self.epoch_length)[start:].astype(np.int64)
        positions = np.arange(base + start, base + self.epoch_length, dtype=np.uint64)
        positions = positions * np.uint64(self._stride) + np.uint64(self._offset) \
            if self._positions is None else \
            self._positions[base + start:base + self.epoch_length].astype(np.uint64)
        self._counted_by_loader = True
        return positions, ids

    def set_epoch(self, epoch):
        """The next iter() reads recorded epoch ``epoch`` (as DDP loops call
        it before each epoch). The epoch the sampler is at (or resumes in,
        after load_state_dict) keeps its place; a later one starts at its
        beginning, and the epochs in between are never read (a bound store is
        planned from there, as after load_state_dict); one past ``epochs``
        grows the plan to it (see _grow). An epoch begun already (a batch
        looked at before the loop) is read again from its start, as a
        load_state_dict there would."""
        epoch = check_int("epoch", epoch)
        self._pass_unread()
        if epoch != self._epoch:
            if epoch >= self.epochs:
                self._grow(epoch + 1, f"set_epoch({epoch})")
            self._move_to(epoch, 0, self.seed, self.fingerprint)
        # state_dict() names this epoch from now on, with consumed=0 too.
        self._current_epoch = epoch
        self._yielded = self._taken_from = self._start

    def note_yielded(self, count):
        """``count`` of the epoch's indices, from where it began (or resumed),
        have been handed out: the count state_dict() takes from now on, as
        exact. A loader calls it as its loop gets each batch: after
        take_epoch(), or after drawing the epoch from iter() through a batch
        sampler ahead of its loop (handed_out)."""
        self._yielded = self._taken_from + check_int("count", count)
        self._counted_by_loader = True

    def handed_out(self):
        """(position() at which the epoch in progress began or resumed, how
        many of its indices iter() has yielded since, or note_yielded last
        said). A loader that draws an epoch through a batch sampler notes
        it after each batch, to give it back to note_yielded when its loop
        has that batch (the batch sampler drew what that batch needed, as
        under torch's DataLoader without workers)."""
        return (self._current_epoch * self.epoch_length + self._taken_from,
                self._yielded - self._taken_from)

    def _pass_unread(self):
        """The epoch last begun is left: a cluster store's own reads of it
        that nobody read (a loop over torch's DataLoader that broke off it:
        the indices after it, and those its workers were handed but
        dropped) are passed, as opt4store.DataLoader passes what its loop
        did not read. A local store passes them itself when the next epoch
        begins (begin_epoch); a cluster store's plan interleaves other
        hosts' reads, so its store waited on them: each epoch's first
        batches stalled, and a live peer was declared lost."""
        epoch, begun = self._current_epoch, self._taken_from
        if self._positions is None or self._counted_by_loader or \
                self._epoch != epoch + 1 or self._yielded >= self.epoch_length:
            return
        ids = self._window.epoch_ids(epoch)
        if ids is None:
            return
        base = epoch * self.epoch_length
        positions = self._positions[base + begun:base + self.epoch_length]
        for store in self._read_through:  # the cluster stores read through it
            if store.is_open:
                store.mark_consumed(positions, ids[begun:], unread_only=True)
        self._yielded = self.epoch_length  # passed once

    def _begin_epoch(self):
        """Starts the next recorded epoch: (its first plan index, the index in
        it to resume at)."""
        self._pass_unread()
        epoch = self._epoch
        if epoch >= self.epochs:
            self._grow(epoch + 1, f"iter() of epoch {epoch}")
            for store in self._stores:
                self._plan_store(store)
        start, self._start = self._start, 0
        self._epoch = epoch + 1
        self._current_epoch = epoch
        self._yielded = self._taken_from = start
        # The stores get the epochs ahead now, long before readers reach them.
        self._record_ahead(epoch)
        base = epoch * self.epoch_length
        for store in self._stores:
            # Unread positions before here (drop_last's tail) are not read now.
            store.begin_epoch((base + start) * self._stride + self._offset)
        return base, start

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
        saved_seed = state.get("seed")
        if saved_seed is not None:
            if isinstance(saved_seed, bool) or not isinstance(saved_seed, numbers.Integral):
                raise InvalidArgumentError(
                    f"load_state_dict: the state's seed {saved_seed!r} is not an integer or None")
            saved_seed = int(saved_seed)
        fingerprint, seed = self._fingerprint_with_seed(saved_seed)
        theirs = state.get("fingerprint")
        if theirs != self._fingerprint_as_saved(state, fingerprint):
            if isinstance(theirs, str) and len(theirs) == 40:
                raise InvalidArgumentError(
                    "this state_dict was saved by an older opt4store, whose plan fingerprint "
                    f"was a SHA-1 ({theirs[:12]}...); plans are now fingerprinted with "
                    f"PlanFingerprint ({self.fingerprint}), so it cannot be checked against "
                    "this sampler's plan and does not load (see PlannedSampler's docstring)")
            raise InvalidArgumentError(
                f"this state belongs to another plan (fingerprint {theirs!r}, this sampler's "
                f"is {self.fingerprint!r}): a different sampler, seed or epoch count (or a "
                "state saved before the fingerprint named the first epoch only)")
        if "epoch" not in state or "index" not in state:
            raise InvalidArgumentError(
                "load_state_dict: the state lacks an integer 'epoch' and 'index'")
        epoch = check_int("state['epoch']", state["epoch"])
        start = check_int("state['index']", state["index"])
        epochs = int(state.get("epochs", self.epochs))  # read by _fingerprint_as_saved
        if epochs > self.epochs:  # saved by a run whose plan grew
            self._grow(epochs, f"load_state_dict of a state of {epochs} epochs")
        if epoch > self.epochs or start and not (start < self.epoch_length and
                                                 epoch < self.epochs):
            raise InvalidArgumentError(
                f"load_state_dict: epoch {epoch}, index {start} is not in this plan of "
                f"{self.epochs} epochs of {self.epoch_length} indices (the index is below "
                f"the epoch length; epoch {self.epochs}, the finished state, has index 0)")
        self._move_to(epoch, start, seed, fingerprint)

    def _move_to(self, epoch, start, seed, fingerprint):
        """The next iter() reads `epoch` from index `start`, in the order of
        `seed` (recorded again where it is another, or where the epochs from
        there were let go), and the bound stores are planned from there."""
        first = min(epoch, self.epochs - 1)
        lost = any(self._window.epoch_ids(e) is None
                   for e in range(first, self._recorder.next_epoch))
        # Recorded again from epoch 0 with our seed, or where the order follows
        # from the epoch (no generator: DistributedSampler); the caller's
        # generator cannot be rewound.
        if lost and self.seed is None and hasattr(self.sampler, "generator"):
            raise InvalidArgumentError(
                f"load_state_dict: epoch {first} of this plan was read and let go (a plan of "
                f"more than {WHOLE_PLAN_READS} reads is held a few epochs at a time), and the "
                "base sampler's generator cannot be rewound to record it again; make a new "
                "PlannedSampler (and Store.bind it) to resume there")
        if seed != self.seed or lost:
            # Record this order again from its first epoch, with the saved
            # seed (bound CachedDatasets hold the same window, now refilled).
            self.seed = seed
            if seed is not None:
                self.sampler.generator = torch.Generator().manual_seed(seed)
            self._recorder = EpochRecorder(self.sampler)
            self._window.clear()
            self._whole = None
            self.fingerprint = fingerprint
        self._epoch = epoch
        self._start = start
        self._current_epoch = epoch
        self._yielded = self._taken_from = start
        self._record_ahead(append=False)  # the stores get the plan anew just below
        for store in self._stores:
            self._plan_store(store)
        if self._replan is not None:
            self._replan(self.position())

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
        plans it (a reader of a shared store): the epochs recorded from
        position()'s on, as an open plan that _record_ahead appends to."""
        if not store.is_owner:
            return
        first = min(self._epoch, self.epochs - 1)
        self._record_ahead(first, append=False)
        epochs = range(first, self._recorder.next_epoch)
        of = self._window.epoch_ids if self._stride == 1 else self._host_epoch
        # The epochs as they are (no array of several epochs is made), in
        # one call: the planner never runs on the first alone.
        store.set_plan([of(e) for e in epochs], self.epoch_length * self._stride,
                       self.position() * self._stride, total_epochs=self.epochs,
                       first_epoch=first)

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
        if num_replicas % local_world_size:
            raise InvalidArgumentError(
                f"{local_world_size} local ranks a host, but the DistributedSampler has "
                f"{num_replicas} replicas, not a multiple of it: every host runs "
                "local_world_size ranks (check local_world_size= or LOCAL_WORLD_SIZE)")
        if rank % local_world_size != local_rank:
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

    def use_positions(self, positions, replan=None, store=None):
        """Yields a cluster store's positions: own read i (epoch * len +
        index) at positions[i] (increasing); replan(read) re-plans that
        store from own read `read` on after each load_state_dict. `store`,
        the Store read through, tells state_dict() what was read here.
        Store.bind calls it."""
        positions = np.asarray(positions)  # its dtype kept: a /dev/shm map is not copied
        if positions.dtype.kind not in "iu" or positions.ndim != 1:
            raise InvalidArgumentError(f"positions must be a 1-d integer array, not "
                                       f"{positions.dtype} of shape {positions.shape}")
        if len(positions) != self.epochs * self.epoch_length:
            raise InvalidArgumentError(f"{len(positions)} positions for a plan of "
                                       f"{self.epochs * self.epoch_length} reads")
        self._positions = positions
        self._replan = replan
        self._stride, self._offset = 0, 0
        if store is not None and store not in self._read_through:
            self._read_through.append(store)
        self._window.positions = positions

    @property
    def store_layout(self):
        """(stride, offset): this sampler's i-th read is at store position
        i * stride + offset ((1, 0) unless a store is shared by local ranks)."""
        return self._stride, self._offset

    def store_plan(self):
        """The plan as the store numbers positions, a few epochs of it
        (a PlanWindow: for drift checks and lost-position recovery)."""
        self._window.stride, self._window.offset = self._stride, self._offset
        return self._window

    def _host_epoch(self, epoch):
        """Epoch `epoch` of the host's plan: every local rank's order,
        interleaved read by read. The other ranks' orders are recorded anew
        at each call (the store keeps its own copy), so that the sampler
        does not hold local_world_size plans."""
        local_world = self._stride
        node = self.sampler.rank // local_world
        host = np.empty((self.epoch_length, local_world), dtype=np.int64)
        for r in range(local_world):
            if r == self._offset:
                host[:, r] = self._window.epoch_ids(epoch)
                continue
            order = rank_epoch(self.sampler, node * local_world + r, epoch)
            if len(order) != self.epoch_length:
                raise InvalidArgumentError(
                    f"rank {node * local_world + r}'s epoch {epoch} has {len(order)} indices, "
                    f"rank {self.sampler.rank}'s {self.epoch_length}: the local ranks of a "
                    "shared store need equal epoch lengths")
            host[:, r] = order
        return host.reshape(-1)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_stores"] = []  # a worker's copy does not re-plan the owner's store
        state["_read_through"] = []
        return state
