"""opt4store.Store: the Python face of the C++ store (engine/include/opt4store/store.h)."""

import os
import pickle
import warnings
import weakref

import numpy as np
import torch

from . import _batch_layout, _core, _values
from ._checks import (MAX_UINT64, check_bool, check_dir_path, check_index, check_int,
                      check_number, check_position, check_str, int_array, paired_ints)
from .cluster import ClusterSharing
from .distributed import WARN_UNSHARED, LocalSharing, unshared_ddp_warning
from ._errors import InvalidArgumentError, InvalidTypeError, IOError_
from ._sizes import parse_size

NO_POSITION = _core.NO_POSITION
# Store.warn_once's kind for drift: the engine's own (kWarnDrift), so that
# CachedDataset's warning and the engine's log are one warning.
WARN_DRIFT = 1
# The package's reads pass it as get's default: a stored None is a hit.
MISS = object()

# The settings a store saves, from the one table (store_options.h):
# (name, kind, default, help); kind is "size", "count" or "name".
SETTINGS = tuple(_core.setting_fields())
MAX_FETCH_TIMEOUT_MS = _core.MAX_FETCH_TIMEOUT_MS  # store_options.h's kMaxFetchTimeoutMs
# The largest ram= and staging=: the largest shared segment
# (SharedSegment::kMaxSegmentBytes, 2**56 bytes), which the engine checks at
# open; checked here too so that a new store refuses it at once.
MAX_RAM_BYTES = 1 << 56


def _setting_value(name, kind, value):
    """A keyword's value as the store reads it: sizes through parse_size,
    counts as ints in [0, 2**64 - 1]; names as non-empty strs (the engine
    checks that they name something)."""
    if value is None:
        return value
    if kind == "name":
        return check_str(name, value)
    if kind == "size":
        size = parse_size(value, name)
        if name in ("ram", "staging") and size > MAX_RAM_BYTES:
            raise InvalidArgumentError(f"{name}: {size} bytes is above the largest RAM tier, "
                                       f"{MAX_RAM_BYTES} bytes (2**56)")
        return size
    return check_int(name, value, 0, MAX_UINT64)


class Store:
    """A persistent two-tier (RAM + disk) cache of decoded samples.

    ``Store(path, ram="2GiB", disk="20GiB", policy="opt")``. ``ram_items=N``
    instead of ``ram=`` gives a capacity in items; ``disk=0`` disables the
    disk tier (nothing is written under ``path``). Opening an existing store
    reuses what it holds; its dataset size is fixed at creation. The
    settings (``ram``, ``ram_items``, ``disk``, ``policy``,
    ``prefetch_depth``, ``staging``, ``compression``, ``sync``: the README's
    "Options", ``SETTINGS`` here) are saved with the store; one not given
    keeps the saved value, or takes its default in a new store.

    ``fingerprint="..."`` names what made the values (a dataset version, a
    transform's repr, a hash): saved at creation, and reopening with
    another raises ``StaleStoreError`` naming both; ``reset=True`` empties
    the store as it opens (settings kept) and saves the new fingerprint.
    Left out, the saved fingerprint stays, and CachedDataset spot-checks a
    few stored values against the dataset instead (its ``spot_check=``).

    The C++ store opens when the dataset size is known: at once for an
    existing store, else when a CachedDataset binds the store to a dataset.
    The process that opens it is the owner; DataLoader workers (forked or
    spawned) share its RAM tier. One process at a time may own a store
    directory: a second gets ``BusyError``.

    DDP: ``shared="local"`` (the same call on every rank) makes the local
    ranks of a host share one store. Local rank 0 opens it as the owner and
    plans it with the host's interleaved plan; the other local ranks attach
    to it as readers (they never open the disk tier nor set a plan).
    ``local_rank=`` / ``local_world_size=`` override the LOCAL_RANK and
    LOCAL_WORLD_SIZE that torchrun sets; ``shared_name=`` names the handle
    file used without a torch.distributed process group (default: from the
    path); ``shared_timeout=`` (seconds) is how long a reader waits for that
    file. ``stats()`` on any rank gives the host's totals. Call ``close()``
    on every rank, in any order: the owner's returns once the other local
    ranks have closed (or are gone), so that what they loaded is cached and
    counted; it gives up, with a warning, once none of them has attached,
    read or closed for 30 s (or shared_timeout, if shorter). See
    ``opt4store.distributed``.

    Across hosts: ``shared="cluster"`` makes the hosts' stores one cache
    (each item loaded from the source by its home host only, fetched by the
    others over a gloo group of its own); the local ranks of a host share
    its store as with "local". ``peer_window=`` (reads) is how far ahead
    items are served and fetched; ``peer_timeout=`` (seconds) how long a
    reply, or a peer that asks for nothing, is waited for before that peer
    counts as lost. See ``opt4store.cluster``.

    Every argument is checked, here and in the methods: a wrong type raises
    InvalidTypeError (also a TypeError), a value out of range
    InvalidArgumentError, an index outside the dataset OutOfRangeError; the
    message names the argument. ``fetch_timeout_ms`` (how long a worker
    waits for a disk fetch, default 10000) is 0 to 2**31 - 1;
    ``queue_bytes`` (the workers' queue to the owner, default 64 MiB: a
    worker's value may take half of it) 1 MiB to 2**56. Neither is saved.
    """

    def __init__(self, path, ram=None, disk=None, policy=None, *, ram_items=None,
                 prefetch_depth=None, staging=None, compression=None, sync=None,
                 fingerprint=None, reset=False, fetch_timeout_ms=None, queue_bytes=None,
                 shared=None,
                 local_rank=None, local_world_size=None, shared_name=None, shared_timeout=300.0,
                 peer_window=8, peer_timeout=120.0):
        # path=None: a store without a disk tier (nothing is written).
        self.path = check_dir_path("path", path) if path is not None else ""
        settings = {"ram": ram, "ram_items": ram_items, "disk": disk, "policy": policy,
                    "prefetch_depth": prefetch_depth, "staging": staging,
                    "compression": compression, "sync": sync}
        self._options = {name: _setting_value(name, kind, settings[name])
                         for name, kind, _, _ in SETTINGS}
        check_str("fingerprint", fingerprint, allow_none=True)
        reset = check_bool("reset", reset)
        self._options["fingerprint"] = fingerprint
        self._options["reset"] = reset
        self._options["fetch_timeout_ms"] = check_int(
            "fetch_timeout_ms", fetch_timeout_ms, 0, MAX_FETCH_TIMEOUT_MS, allow_none=True)
        self._options["queue_bytes"] = parse_size(queue_bytes, "queue_bytes")
        # Test-only options (opt4store._testing) ride on the instance.
        self._options.update(getattr(self, "_testing_options", {}))
        _core.check_options(self._options)  # a bad value fails here, not at binding
        self._core = None
        self._read_to = -1  # the highest plan position read in this process
        self._close_after = weakref.WeakSet()  # see close_after
        self._handle = None
        if shared is not None and shared is not False and shared not in ("local", "cluster"):
            raise InvalidArgumentError(
                f"shared: expected None, 'local' or 'cluster', got {shared!r}")
        check_int("local_rank", local_rank, 0, MAX_UINT64, allow_none=True)
        check_int("local_world_size", local_world_size, 1, MAX_UINT64, allow_none=True)
        check_str("shared_name", shared_name, allow_none=True)
        if shared_name is not None and "/" in shared_name:
            raise InvalidArgumentError(f"shared_name: {shared_name!r} holds a '/'")
        shared_timeout = check_number("shared_timeout", shared_timeout, 0.0, allow_inf=True)
        peer_window = check_int("peer_window", peer_window, 1, 1 << 20)  # used by "cluster" only
        peer_timeout = check_number("peer_timeout", peer_timeout, 0.001, allow_inf=False)
        self._sharing = LocalSharing(self.path, local_rank, local_world_size, shared_name,
                                     shared_timeout, self._options) if shared else None
        self._cluster = None  # shared="cluster": the binding and the peer threads
        self._peer_reader = None  # shared="cluster": waits for items from other hosts
        if shared == "cluster":
            self._cluster = ClusterSharing(self._sharing, peer_window, peer_timeout, batch=64)
        # A shared store opens at binding, in local rank 0 only.
        if self._sharing is None and self.path and \
                os.path.exists(os.path.join(self.path, "index", "CURRENT")) and \
                self._options["disk"] != 0:
            self._open(None)

    @classmethod
    def _open_for_testing(cls, path, testing, **options):
        """A Store given test-only engine options as well (``testing``, a
        dict such as {"shm_free_bytes_for_testing": N}); opt4store._testing
        is its entry point. Not for users."""
        store = cls.__new__(cls)
        cls._init_for_testing(store, path, testing, **options)
        return store

    def _init_for_testing(self, path, testing, **options):
        self._testing_options = dict(testing)
        self.__init__(path, **options)

    # ---- opening

    def _open_core(self, dataset_size):
        options = dict(self._options)
        if dataset_size is not None:
            options["dataset_size"] = dataset_size
        return _core.Store.open(self.path, options)

    def _open(self, dataset_size):
        self._core = self._open_core(dataset_size)

    def _require_open(self):
        if self._core is None:
            raise IOError_("the store is not open yet: wrap a dataset with CachedDataset first")
        if self._core.closed:
            raise IOError_("the store is closed")
        return self._core

    # ---- binding: what CachedDataset and PlannedSampler call

    def bind(self, dataset_size, sampler=None, source=None):
        """Opens the store for a dataset of ``dataset_size`` items and gives it
        ``sampler``'s plan (a PlannedSampler). CachedDataset calls it; calling
        it again with the same size only (re)plans. A shared store opens in
        local rank 0, which plans it, and the other local ranks attach to it.
        A cluster store (shared="cluster") plans itself from every rank's
        order, and its host loads from ``source`` (the dataset) what it
        serves to other hosts."""
        dataset_size = check_int("dataset_size", dataset_size, 1, MAX_UINT64)
        if sampler is not None and not hasattr(sampler, "attach_store"):
            raise InvalidTypeError(f"sampler: expected an opt4store.PlannedSampler or None, got "
                                   f"{type(sampler).__name__}")
        if self._core is None and self._cluster is not None:
            def open_core(extra_ram_items, store_size):
                if self._options.get("ram_items"):
                    self._options["ram_items"] += extra_ram_items
                self._open(store_size)
                return self._core

            try:
                self._core, _ = self._cluster.connect(self, open_core, dataset_size, sampler,
                                                      source)
            except BaseException:
                if self._core is not None and not self._core.closed:
                    self._core.close()
                self._core = None
                raise
            self._peer_reader = self._cluster.reader
            return
        if self._cluster is not None:
            if self._peer_reader.dataset_size != dataset_size:
                raise InvalidArgumentError(
                    f"the cluster store holds a dataset of {self._peer_reader.dataset_size} "
                    f"items; this dataset has {dataset_size}")
            return  # planned once, for the whole run, at the first binding
        if self._core is None and self._sharing is not None:
            def open_owner():
                self._open(dataset_size)
                if sampler is not None:
                    sampler.attach_store(self)
                return self._core

            check = sampler.check_shareable if sampler is not None else None
            try:
                core, owner = self._sharing.connect(open_owner, dataset_size, check)
            except BaseException:
                if self._core is not None and not self._core.closed:
                    self._core.close()
                self._core = None
                raise
            self._core = core
            if owner:
                return  # open_owner attached the sampler before publishing
        elif self._core is None:
            self._open(dataset_size)
            unshared = unshared_ddp_warning(sampler)
            if unshared:
                self.warn_once(WARN_UNSHARED, unshared)
        elif self._core.dataset_size() != dataset_size:
            raise InvalidArgumentError(
                f"the store at {self.path!r} holds a dataset of {self._core.dataset_size()} "
                f"items; this dataset has {dataset_size}")
        if sampler is not None:
            sampler.attach_store(self)

    @property
    def shared(self):
        """The ``shared=`` this Store was made with: None, "local" or "cluster"."""
        return "cluster" if self._cluster is not None else \
            "local" if self._sharing is not None else None

    @property
    def local_layout(self):
        """(local_rank, local_world_size) of a store shared by a host's local
        ranks, else None."""
        return self._sharing.layout() if self._sharing is not None else None

    def set_plan(self, ids, epoch_length, start, total_epochs=0, first_epoch=0):
        """Gives the owner's store the plan ``ids`` (an int array, or a list
        of them read one after another) with epochs of ``epoch_length``, its
        readers starting at ``start``. With ``total_epochs``, an open plan:
        ``ids`` are its epochs from ``first_epoch`` on, and append_plan gives
        the later ones. RAM keeps what the new plan's policy would keep of
        it (with opt: the items read soonest, within the budget)."""
        core = self._require_open()
        parts = list(ids) if isinstance(ids, (list, tuple)) and ids and \
            isinstance(ids[0], np.ndarray) else [ids]
        parts = [_plan_part(core, p) for p in parts]
        core.set_plan(parts, check_int("epoch_length", epoch_length),
                      check_position("start", start), check_int("total_epochs", total_epochs),
                      check_int("first_epoch", first_epoch))

    def append_plan(self, ids):
        """The next whole epochs of the open plan set_plan gave."""
        core = self._require_open()
        core.append_plan(_plan_part(core, ids))

    def get(self, position, index, *, default=None):
        """The value stored for ``index``, or ``default`` when it is not
        stored (a stored None reads as None: pass a default of your own to
        tell them apart); ``position`` is its plan position (NO_POSITION
        when unknown), which counts it as read there."""
        core = self._require_open()
        position = check_position("position", position)
        index = check_index("index", index, self._items(core))
        if self._peer_reader is not None:  # a cluster store: see opt4store/cluster.py
            index = int(self._peer_reader.store_ids((position,), (index,))[0])
            self._peer_reader.await_arrivals((index,))
        result = core.get(position, index)
        if position != NO_POSITION and position > self._read_to:
            self._read_to = position
        return _values.decoded(result, default)

    def get_batch(self, positions, indices, *, default=None):
        """Store.get for each (position, index) pair, in one call: a list of
        values, ``default`` for a miss."""
        core = self._require_open()
        positions, indices = paired_ints(positions, indices, core.dataset_size())
        if self._peer_reader is not None:
            indices = self._peer_reader.store_ids(positions, indices)
            self._peer_reader.await_arrivals(indices)
        results = core.get_batch(positions, indices)
        planned = positions[positions != NO_POSITION]
        if len(planned):
            self._read_to = max(self._read_to, int(planned.max()))
        return [_values.decoded(r, default) for r in results]

    def read_into(self, positions, indices, rows, meta, payload_bytes, offsets, leaves):
        """Reads each (position, index) into row rows[i] of every leaf tensor,
        one copy from the store: the payload bytes at offsets[j] go to
        leaves[j]. For values whose meta equals ``meta`` and whose payload is
        payload_bytes long; returns a code per read: 0 read, 1 a miss, 2 a
        value of another layout (its rows hold garbage). opt4store.DataLoader
        assembles batches with it."""
        core, args = self._rows_call(positions, indices, rows, meta, payload_bytes, offsets,
                                     leaves)
        if self._peer_reader is not None:
            self._peer_reader.await_arrivals(args[1])
        return core.read_into(*args)

    def put_rows(self, positions, indices, rows, meta, payload_bytes, offsets, leaves):
        """read_into's inverse: stores row rows[i] of every leaf tensor as the
        value of (positions[i], indices[i]), a value with ``meta`` whose
        payload (payload_bytes long) holds leaves[j]'s row at offsets[j].
        opt4store.DataLoader stores the rows its workers loaded with it."""
        core, args = self._rows_call(positions, indices, rows, meta, payload_bytes, offsets,
                                     leaves)
        core.put_rows(*args)

    def _rows_call(self, positions, indices, rows, meta, payload_bytes, offsets, leaves):
        """The checked arguments of read_into and put_rows, with a cluster
        store's ids: (core, (positions, ids, rows, meta, payload_bytes,
        offsets, leaves))."""
        core = self._require_open()
        positions = int_array("positions", positions, np.uint64)
        indices = int_array("indices", indices, np.int64, core.dataset_size())
        rows = int_array("rows", rows, np.int64)
        if not len(positions) == len(indices) == len(rows):
            raise InvalidArgumentError("positions, indices and rows differ in length: "
                                       f"{len(positions)}, {len(indices)} and {len(rows)}")
        if not isinstance(meta, bytes):
            raise InvalidTypeError(f"meta: expected bytes, got {type(meta).__name__}")
        offsets = [check_int("offsets", o) for o in offsets]
        leaves = list(leaves)
        if len(offsets) != len(leaves) or not all(isinstance(t, torch.Tensor) for t in leaves):
            raise InvalidTypeError("leaves: expected one tensor per offset")
        if self._peer_reader is not None:
            indices = self._peer_reader.store_ids(positions, indices)
        return core, (positions, indices, rows, meta, check_int("payload_bytes", payload_bytes),
                      offsets, leaves)

    def _items(self, core):
        """The dataset's size (a cluster store holds more ids: its arrivals')."""
        reader = self._peer_reader
        return reader.dataset_size if reader is not None else core.dataset_size()

    def batch_reader(self):
        """read_into for a caller whose arrays are right by construction
        (opt4store.DataLoader: positions and indices from the plan, rows it
        numbered): the native call, which checks them again, without
        read_into's Python checks (30-70 us a batch here). A cluster store
        maps ids first: its read_into."""
        if self._peer_reader is not None:
            return self.read_into
        return self._require_open().read_into

    def batch_reader_async(self):
        """batch_reader's call as a job on a thread of its own (its wait()
        returns the codes), or None for a cluster store, whose reads wait
        for arrivals in Python."""
        if self._peer_reader is not None:
            return None
        return self._require_open().read_into_async

    def ram_budget(self):
        """(ram_items, False) when the store's RAM is counted in items, else
        (ram bytes, True): the budget given, before a cluster store adds room
        for arrivals."""
        items = self._options.get("ram_items") or 0
        return (items, False) if items else (self._options.get("ram") or 0, True)

    def warn_once(self, kind, message):
        """Issues ``message`` as a RuntimeWarning the first time any process
        of this store (owner, readers, DataLoader workers) asks with this
        ``kind``: once per store, not once per worker."""
        check_int("kind", kind, 0, (1 << 32) - 1)  # a WARN_* number
        check_str("message", message, allow_empty=True)
        core = self._core
        if core is None or core.closed or core.first_warning(kind):
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def last_position_read(self):
        """The highest plan position this process has read through this
        Store object with get or get_batch (-1: none): a PlannedSampler
        checks with it that the indices it handed out were read here."""
        return self._read_to

    def begin_epoch(self, position):
        """A sampler began handing out an epoch at plan ``position`` (a
        PlannedSampler calls it): reads that lost their position look for it
        from there, not in the previous epoch's unread tail."""
        self._require_open().begin_epoch(check_position("position", position))

    def reading_from(self):
        """Where reads that lost their position look for it: the later of the
        frontier and the start of the epoch the sampler began last."""
        return self._require_open().reading_from()

    def mark_consumed(self, positions, indices, *, unread_only=False):
        """Marks plan positions as read without reading them (a loader that
        skips them: drop_last's tail), so that the store does not wait for
        them; with unread_only, those a reader has not read (or the store
        passed) only."""
        core = self._require_open()
        positions, indices = paired_ints(positions, indices, core.dataset_size())
        if unread_only:
            unread = ~core.consumed(positions)
            positions, indices = positions[unread], indices[unread]
        if self._peer_reader is not None:
            indices = self._peer_reader.store_ids(positions, indices)
        for position, index in zip(positions.tolist(), indices.tolist()):
            core.mark_consumed(position, index)

    def locate(self, indices):
        """Where each index is now: 0 nowhere, 1 the RAM tier, 2 the disk
        tier. A hint (an item may move before it is read); counts nothing."""
        core = self._require_open()
        return core.locate(int_array("indices", indices, np.int64, core.dataset_size()))

    def wait_for_puts(self, timeout=10.0):
        """Waits until the owner has taken every value that a worker (any
        process) put before this call, so that locate() sees them. False
        when ``timeout`` seconds ran out first."""
        timeout = check_number("timeout", timeout, allow_inf=True)  # inf: some 24 days
        return self._require_open().wait_for_puts(int(min(timeout * 1000, MAX_FETCH_TIMEOUT_MS)))

    def peek(self, index, *, default=None):
        """The value stored for ``index``, or ``default``, read to check it: no
        access is counted, no plan position consumed, and the tiers are left
        as they were. In the owner process (a reader does not see the disk
        tier)."""
        core = self._require_open()
        index = check_index("index", index, core.dataset_size())
        return _values.decoded(core.peek(index), default)

    def put(self, position, index, value):
        """Stores ``value`` for ``index`` (loaded for plan ``position``)."""
        core = self._require_open()
        position = check_position("position", position)
        index = check_index("index", index, self._items(core))
        if self._peer_reader is not None:
            index = int(self._peer_reader.store_ids((position,), (index,))[0])
        # A tensor subclass (its class and attributes) goes through pickle.
        if _values.plain_tensor(value):
            core.put_tensor(position, index, value)
            return
        try:
            meta, payload = _values.encode(value, self.warn_once)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as e:
            raise InvalidTypeError(f"value: a {type(value).__name__} cannot be stored: {e}") \
                from e
        core.put_encoded(position, index, meta, payload)

    # ---- public

    @property
    def fingerprint(self):
        """The ``fingerprint=`` this Store was given, or None (the store then
        keeps the one it saved, if any)."""
        return self._options.get("fingerprint")

    @property
    def is_open(self):
        return self._core is not None and not self._core.closed

    @property
    def is_owner(self):
        """True in the process that opened the store: local rank 0 of a
        shared store; False in its readers and DataLoader workers."""
        return self.is_open and self._core.is_owner()

    def stats(self):
        """Totals across every process that used the store: accesses,
        hits_ram, hits_disk, source_loads, drift, ram_items, ram_bytes_used,
        disk_items, disk_live_bytes, prefetched, waits, and every other field
        of the one stats table (README, "Stats"). Zeros before the store
        opens. After close(), what `opt4store stats` shows of a closed
        store: the counters as they stood at close (last_run True), and the
        disk tier's gauges; the owner, cursor and RAM groups are 0."""
        if self._core is None:
            return _core.zero_stats()
        return self._core.stats()  # closed: the engine keeps them (Store::Stats)

    def flush(self):
        """Makes every earlier write durable and saves the cursor."""
        if self._core is not None and self._core.is_owner():
            self._core.flush()

    def close_after(self, reader):
        """close() first calls reader.wait(), which returns once no call of
        the reader's threads into this store is in progress (the store's
        Close needs none): opt4store.DataLoader's read-ahead. Holds the
        reader weakly."""
        self._close_after.add(reader)

    def close(self):
        """Flushes, saves the cursor and releases the store. Idempotent. The
        owner of a shared store first waits for the other local ranks to
        close theirs (see shared= above), unless a `with` block ends in an
        error: they wait for it in DDP's next collective then."""
        self._close(wait_for_ranks=True)

    def _close(self, wait_for_ranks):
        for reader in list(self._close_after):
            reader.wait()
        if self._sharing is not None:
            self._sharing.unpublish()  # first: a rank that closed may open again
            if wait_for_ranks:
                self._sharing.wait_for_rank_readers(self._core)
        if self._cluster is not None and self._core is not None and not self._core.closed:
            self._cluster.close()  # serves the peers until they are done
        if self._core is not None and not self._core.closed:
            self._core.close()
            _batch_layout.drop_kept()
        if self._cluster is not None:
            self._cluster.remove_state()

    def __enter__(self):
        return self

    def __exit__(self, kind, error, _):
        ended = kind is None or issubclass(kind, SystemExit) and error.code in (0, None)
        self._close(wait_for_ranks=ended)

    # ---- pickling for spawned workers: they attach to the owner's store

    def __getstate__(self):
        core = self._require_open()
        return {"path": self.path, "options": self._options, "handle": core.handle(),
                "peer_reader": self._peer_reader}

    def __setstate__(self, state):
        self.path = state["path"]
        self._options = state["options"]
        self._handle = state["handle"]
        self._sharing = None
        self._cluster = None
        self._peer_reader = state.get("peer_reader")
        self._read_to = -1
        self._close_after = weakref.WeakSet()
        self._core = _core.Store.attach(self._handle)

    def __repr__(self):
        state = "closed" if self._core is not None and self._core.closed else \
            "open" if self.is_open else "not open"
        return f"opt4store.Store({self.path!r}, {state})"


def _plan_part(core, ids):
    """ids as an int array: numpy int arrays (the sampler's uint32 epochs)
    pass without a copy, and the binding checks their range."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu" and ids.ndim == 1:
        return ids
    return int_array("ids", ids, np.int64, core.dataset_size())

