"""The plan of one host's store in a cluster (Store(..., shared="cluster")).

Every host computes it from every rank's order (recorded from the
DistributedSampler's seed, no messages), so all hosts agree on it.

Item x's home is host x % hosts: its store alone loads x from the source
and keeps it, and the other hosts fetch x from it. Once hosts are lost,
home_of gives their items new homes among the survivors
(opt4store/_cluster_heirs.py); this plan stays as it was. The hosts read in
lockstep (DDP): step i is every rank's i-th read. Host h's plan lists, step
by step:
  serve    another host's read at step i + window of an item h is home to
           (h's peer server reads it from h's store then, for the requester);
  arrival  h's own read at step i + window of an item another host is home
           to (h's peer prefetcher puts it into h's store then);
  own      h's local ranks' reads at step i.
An arrival and the read it is for carry an id of their own in h's store
(dataset_size + k for h's k-th arrival), not the item's: the store's OPT,
over h's budget, then keeps the home items h serves and reads soonest, and
holds each arrival from its arrival to its read and not after (keeping a
copy of another host's item would cost a home item's place to save a
fetch, not a source load).
"""

import numpy as np

SERVE, ARRIVAL, OWN = 0, 1, 2


def index_dtype(bound, narrowest=np.int32):
    """The narrowest signed dtype, from `narrowest` on, for values in
    [-1, bound). A host plan's columns (positions, store ids, reads, items)
    fit in 32 bits in any run short of 2**31 positions a host (ImageNet's
    90 epochs on 8 hosts: about 40M), and take half the memory and /dev/shm
    there."""
    for dtype in (np.int16, np.int32):
        if np.dtype(dtype).itemsize >= np.dtype(narrowest).itemsize and \
                bound <= np.iinfo(dtype).max:
            return dtype
    return np.int64


_INFO = {}  # dtype -> np.iinfo


def search(array, keys, side="left"):
    """np.searchsorted(array, keys, side), the keys cast to the integer
    array's dtype first (clipped to its range, which orders them the same
    against its values). A key of another dtype, a Python int against an
    int32 array too, makes numpy copy the whole array at every call:
    about 60 ms for 20M entries."""
    info = _INFO.get(array.dtype) or _INFO.setdefault(array.dtype, np.iinfo(array.dtype))
    if isinstance(keys, (int, np.integer)):  # the common call, kept cheap (about 2 us)
        key = min(max(int(keys), info.min), info.max)
        return array.searchsorted(array.dtype.type(key), side=side)
    keys = np.asarray(keys)
    if keys.dtype.kind == "u":
        keys = np.minimum(keys, keys.dtype.type(min(info.max, np.iinfo(keys.dtype).max)))
    else:
        keys = np.clip(keys.astype(np.int64), np.int64(info.min), np.int64(info.max))
    return np.searchsorted(array, keys.astype(array.dtype), side=side)


def home_of(ids, hosts, lost=()):
    """The home host of each id once the hosts in `lost` are gone.

    Item x's home is x % hosts while that host lives. Its heirs, in order,
    are the other hosts, starting x // hosts places after (mod hosts - 1)
    the one after its home: home + 1 + (x // hosts + j) % (hosts - 1) for
    j = 0, 1, ... The home of x is the first of that list still alive. So
    every host computes the same homes from the same lost set (no
    messages); a lost host's items spread evenly over the others; and
    losing one more host moves only the items whose home it was (its own
    and those it had inherited): the rule composes. -1 where every host is
    lost."""
    ids = np.asarray(ids, dtype=np.int64)
    home = ids % hosts
    if not len(lost):
        return home
    alive = np.ones(hosts, bool)
    alive[list(lost)] = False
    result = np.where(alive[home], home, -1)
    shift = ids // hosts
    for j in range(hosts - 1):
        heir = (home + 1 + (shift + j) % max(1, hosts - 1)) % hosts
        take = (result < 0) & alive[heir]
        result[take] = heir[take]
    return result


def inherited_uses(orders, host, hosts, local_world, lost_at):
    """{item: sorted read steps}: the reads by live ranks (RankOrders),
    epoch by epoch, of items that host `host` is the new home of (home_of
    with the hosts lost_at(epoch) lists) and was not the first home of: its
    own reads and those it serves."""
    rank_host = np.arange(orders.world) // local_world
    epoch_length = orders.epoch_length
    uses = {}
    for epoch in range(orders.epochs):
        lost = sorted(lost_at(epoch))
        if not lost:
            continue
        part = orders.epoch(epoch)
        mine = (home_of(part, hosts, lost) == host) & (part % hosts != host) & \
            ~np.isin(rank_host, lost)[:, None]
        _, step = np.nonzero(mine)
        for item, s in zip(part[mine].tolist(), (step + epoch * epoch_length).tolist()):
            uses.setdefault(item, []).append(s)
    for steps in uses.values():
        steps.sort()
    return uses


class RankOrders:
    """Every rank's reads, an epoch at a time: epoch(e) is int64 [world,
    epoch_length], rank r's reads of epoch e. Nothing of the whole run is
    held: an epoch is computed again when asked (from the
    DistributedSampler's seed), and the last two asked are kept (hosts near
    an epoch's end ask of two). Thread-safe."""

    def __init__(self, epoch_of, world, epochs, epoch_length):
        self._epoch_of = epoch_of
        self.world, self.epochs, self.epoch_length = world, epochs, epoch_length
        self.reads = epochs * epoch_length
        self._kept = {}

    @classmethod
    def of_array(cls, orders, epoch_length=None):
        """Over int64 [world, reads] held whole (tests, small runs)."""
        orders = np.asarray(orders, dtype=np.int64)
        world, reads = orders.shape
        length = epoch_length or reads or 1
        return cls(lambda e: orders[:, e * length:(e + 1) * length], world,
                   reads // length if reads else 0, length)

    def epoch(self, e):
        kept = self._kept
        part = kept.get(e)
        if part is None:
            part = np.asarray(self._epoch_of(e), dtype=np.int64)
            kept = {k: v for k, v in list(kept.items())[-1:]}
            kept[e] = part
            self._kept = kept
        return part

    def read(self, rank, read):
        """The item rank `rank` reads at its read `read`."""
        return int(self.epoch(read // self.epoch_length)[rank, read % self.epoch_length])


class _Columns:
    """Integer columns (of the dtypes given) filled in order, up to a
    bound: np.empty reserves the bound, and only the pages written take
    memory (joining a list of chunks at the end would hold the plan
    twice)."""

    def __init__(self, bound, dtypes):
        self._arrays = [np.empty(bound, dtype) for dtype in dtypes]
        self._size = 0

    def add(self, *columns):
        end = self._size + len(columns[0])
        for array, column in zip(self._arrays, columns):
            array[self._size:end] = column
        self._size = end

    def done(self):
        return [array[:self._size] for array in self._arrays]


class HostPlan:
    """Host `host`'s plan from every rank's reads (`orders`: a RankOrders,
    or int64 [world, reads] held whole) of a dataset of dataset_size items,
    local_world ranks a host (global rank = host * local_world + local
    rank), arrivals and serves `window` reads ahead of the read they are
    for.

    It is built an epoch at a time and keeps only what the store and its
    peer threads look up, not every rank's order, in 32-bit columns where
    they fit (index_dtype): about 7 bytes a read of the cluster with 8
    hosts (bench/README.md, host_plan_bench, has the measured figures).
    Search its columns with search(), not np.searchsorted.

    store_ids       the store's plan: each position's item, or
                    dataset_size + k for the k-th arrival and its read
    store_size      the store's dataset size: dataset_size + arrivals
    own_positions   int64 [local_world, reads]: each own read's position
    arrivals        (position, read position, id, home, rank, read index) of
                    each own read of another host's item, by position
    item_at, step_at, serve_position, serve_positions, served_rank: the
                    lookups by position, and of the serves (a read of
                    another host this host serves)
    """

    def __init__(self, orders, host, hosts, local_world, window, dataset_size):
        if not isinstance(orders, RankOrders):
            orders = RankOrders.of_array(orders)
        world, reads = orders.world, orders.reads
        if world != hosts * local_world:
            raise ValueError(f"{world} ranks are not {hosts} hosts of {local_world}")
        self.host, self.hosts, self.local_world, self.window = host, hosts, local_world, window
        self.reads, self.dataset_size = reads, dataset_size
        self.orders = orders  # a new home serves by them (Heirs)
        bound = reads * (world + local_world)  # positions at most
        position_t = index_dtype(bound)
        arrival_t = index_dtype(reads * local_world)
        self.own_positions = np.full((local_world, reads), -1, position_t)
        arrival_of = np.full((local_world, reads), -1, arrival_t)  # own read -> its arrival
        # events planned at each step (from -window): positions by step
        per_step = np.zeros(reads + window, np.int64)
        store_ids = _Columns(bound, [index_dtype(dataset_size + reads * local_world)])
        arrivals = _Columns(reads * local_world,
                            [position_t, index_dtype(dataset_size), np.int32, index_dtype(reads)])
        serves = _Columns(reads * (world - local_world),
                          [position_t, index_dtype(world * max(1, reads))])
        placed, arrived = 0, 0
        for kind, step, rank, read, item in self._in_order(orders):
            positions = placed + np.arange(len(kind), dtype=np.int64)
            sid = item.copy()
            m = kind == ARRIVAL
            k = arrived + np.arange(int(m.sum()), dtype=np.int64)
            sid[m] = dataset_size + k
            arrival_of[rank[m] - host * local_world, read[m]] = k
            arrivals.add(positions[m], item[m], rank[m], read[m])
            m = kind == OWN
            self.own_positions[rank[m] - host * local_world, read[m]] = positions[m]
            theirs = arrival_of[rank[m] - host * local_world, read[m]].astype(np.int64)
            sid[np.flatnonzero(m)[theirs >= 0]] = dataset_size + theirs[theirs >= 0]
            m = kind == SERVE
            serves.add(positions[m], rank[m] * max(1, reads) + read[m])
            per_step += np.bincount(step + window, minlength=reads + window)
            store_ids.add(sid)
            placed += len(kind)
            arrived += len(k)
        self.store_ids, = store_ids.done()
        # step_start[j]: the first position planned at step j - window or later
        self._step_start = np.concatenate(([0], np.cumsum(per_step))).astype(position_t)
        del arrival_of, per_step
        at, items, ranks, read_index = arrivals.done()
        self.arrivals = (at, self.own_positions[ranks - host * local_world, read_index], items,
                         (items % hosts).astype(np.int32), ranks, read_index)
        self.store_size = dataset_size + len(at)
        serve_at, keys = serves.done()
        self._serve_at, self._serve_rank = serve_at, (keys // max(1, reads)).astype(np.int32)
        by_key = np.argsort(keys, kind="stable")
        self._serve_keys, self._serve_at_by_key = keys[by_key], serve_at[by_key]

    def _in_order(self, orders):
        """Every event (kind, step, rank, read, item arrays), in plan order
        (by step, kind, rank), a chunk at a time: each epoch's events are
        sorted with those of earlier epochs that a later epoch's may
        precede (the last `window` steps), which wait for the next chunk."""
        pending = None
        for epoch in range(orders.epochs):
            events = self._epoch_events(orders, epoch)
            pending = events if pending is None else \
                tuple(np.concatenate(pair) for pair in zip(pending, events))
            # every later epoch's events come at steps from `bound` on
            bound = (epoch + 1) * orders.epoch_length - self.window
            last = epoch == orders.epochs - 1
            now = np.ones(len(pending[0]), bool) if last else pending[1] < bound
            chunk = tuple(a[now] for a in pending)
            pending = tuple(a[~now] for a in pending)
            kind, step, rank = chunk[:3]
            order = np.lexsort((rank, kind, step))
            yield tuple(a[order] for a in chunk)

    def _epoch_events(self, orders, epoch):
        """(kind, step, rank, read, item) of every event for the reads of
        `epoch`: this host's own reads, and the arrivals and serves for
        them, `window` steps earlier."""
        part = orders.epoch(epoch)
        world, length = part.shape
        first = epoch * orders.epoch_length
        local = np.arange(world) // self.local_world == self.host
        read = np.broadcast_to(first + np.arange(length, dtype=np.int64), (world, length))
        rank = np.broadcast_to(np.arange(world, dtype=np.int64)[:, None], (world, length))
        own = np.broadcast_to(local[:, None], (world, length))
        home = part % self.hosts == self.host
        parts = []
        for kind, mask, shift in ((SERVE, ~own & home, -self.window),
                                  (ARRIVAL, own & ~home, -self.window), (OWN, own, 0)):
            parts.append((np.full(int(mask.sum()), kind, np.int64), read[mask] + shift,
                          rank[mask], read[mask], part[mask]))
        return tuple(np.concatenate(c) for c in zip(*parts))

    def __len__(self):
        return len(self.store_ids)

    def item_at(self, positions):
        """The item planned at each position (int64)."""
        sid = self.store_ids[np.asarray(positions, dtype=np.int64)].astype(np.int64)
        arrival = sid >= self.dataset_size
        return np.where(arrival, self.arrivals[2][np.where(arrival, sid - self.dataset_size, 0)],
                        sid).astype(np.int64)

    def step_at(self, position):
        """The lockstep step `position` is planned at (negative: before
        the first read)."""
        return int(search(self._step_start, position, side="right")) - 1 - self.window

    def serve_position(self, rank, read):
        """Where this host serves rank `rank`'s read `read`; -1 where it
        does not."""
        key = rank * max(1, self.reads) + read
        k = int(search(self._serve_keys, key))
        return int(self._serve_at_by_key[k]) if k < len(self._serve_keys) and \
            self._serve_keys[k] == key else -1

    def serve_positions(self, ranks=None):
        """(positions, ranks, reads) of the serves, by position; of the
        ranks listed only, when given."""
        at, rank = self._serve_at, self._serve_rank
        keys = self._serve_keys[np.argsort(self._serve_at_by_key)]
        mine = np.ones(len(at), bool) if ranks is None else np.isin(rank, list(ranks))
        return (at[mine].astype(np.int64), rank[mine].astype(np.int64),
                keys[mine].astype(np.int64) % max(1, self.reads))

    def served_rank(self, position):
        """The rank whose read this host serves at `position`, else -1."""
        k = int(search(self._serve_at, position))
        return int(self._serve_rank[k]) if k < len(self._serve_at) and \
            self._serve_at[k] == position else -1

    def use_mapped(self, own_positions, reads, items):
        """Reads own_positions and the arrivals' read positions and items
        from these arrays from now on: the same values, mapped from the
        readers' files, so that the owner holds them once, not also on its
        heap. Nothing writes them after the build."""
        at, old_reads, old_items, homes, ranks, read_index = self.arrivals
        for new, old in ((own_positions, self.own_positions), (reads, old_reads),
                         (items, old_items)):
            if new.shape != old.shape or new.dtype != old.dtype:
                raise ValueError(f"a mapped array of {new.shape} {new.dtype} cannot stand for "
                                 f"the plan's {old.shape} {old.dtype}")
        self.own_positions = own_positions
        self.arrivals = (at, reads, items, homes, ranks, read_index)

    def resume_position(self, read):
        """Where a run that resumes at every rank's read `read` (lockstep:
        the same for all) starts in this plan: the serves and arrivals for
        reads from `read` on come `window` steps before them."""
        return int(self._step_start[min(max(read, 0), len(self._step_start) - 1)])

    def passed_own_positions(self, read):
        """The own reads planned from resume_position(read) on that were
        read before `read`: a resumed run passes them."""
        start = self.resume_position(read)
        own = self.own_positions[:, :read].reshape(-1)
        return np.sort(own[own >= start]).astype(np.int64)

    def steps_span(self, steps):
        """About how many positions `steps` lockstep reads take here."""
        return max(1, int(np.ceil(len(self) / max(1, self.reads) * steps)))


def rank_orders(sampler, world, epochs, epoch_length):
    """RankOrders of a DistributedSampler-like `sampler` (its order follows
    from rank and epoch) with `world` ranks."""
    from ._epochs import all_ranks_epoch

    def epoch_of(e):
        part = all_ranks_epoch(sampler, world, e)
        if part.shape[1] != epoch_length:
            raise ValueError(f"epoch {e} has {part.shape[1]} indices a rank, not "
                             f"{epoch_length}: a cluster store needs equal epoch lengths")
        return part
    return RankOrders(epoch_of, world, epochs, epoch_length)
