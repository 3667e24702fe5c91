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


def inherited_uses(orders, host, hosts, local_world, lost_at, epoch_length):
    """{item: sorted read steps}: the reads by live ranks, epoch by epoch,
    of items that host `host` is the new home of (home_of with the hosts
    lost_at(epoch) lists) and was not the first home of: its own reads and
    those it serves."""
    orders = np.asarray(orders, dtype=np.int64)
    world, reads = orders.shape
    rank_host = np.arange(world) // local_world
    uses = {}
    for epoch in range(reads // max(1, epoch_length)):
        lost = sorted(lost_at(epoch))
        if not lost:
            continue
        part = orders[:, epoch * epoch_length:(epoch + 1) * epoch_length]
        mine = (home_of(part, hosts, lost) == host) & (part % hosts != host) & \
            ~np.isin(rank_host, lost)[:, None]
        _, step = np.nonzero(mine)
        for item, s in zip(part[mine].tolist(), (step + epoch * epoch_length).tolist()):
            uses.setdefault(item, []).append(s)
    for steps in uses.values():
        steps.sort()
    return uses


class HostPlan:
    """Host `host`'s plan from `orders` (int64 [world, reads]: rank r's reads,
    every epoch one after another, of a dataset of dataset_size items),
    local_world ranks a host (global rank = host * local_world + local
    rank), arrivals and serves `window` reads ahead of the read they are
    for.

    ids             the plan by item (int64)
    store_ids       the store's plan: ids, with dataset_size + k for the
                    k-th arrival and its read
    store_size      the store's dataset size: dataset_size + arrivals
    own_positions   int64 [local_world, reads]: each own read's position
    arrivals        (position, read position, id, home, rank, read index) of
                    each own read of another host's item, by position
    serve_position  int64 [world, reads]: the position at which this host
                    serves rank r's read i, -1 where it does not
    serve_rank      int32 per position: the rank served there, else -1
    steps           int64 per position: the lockstep step it is planned at
    """

    def __init__(self, orders, host, hosts, local_world, window, dataset_size):
        orders = np.asarray(orders, dtype=np.int64)
        world, reads = orders.shape
        if world != hosts * local_world:
            raise ValueError(f"{world} ranks are not {hosts} hosts of {local_world}")
        self.host, self.hosts, self.local_world, self.window = host, hosts, local_world, window
        self.reads = reads
        self.orders = orders  # every rank's reads: a new home serves by them (home_of)
        homes = orders % hosts
        rank_host = np.arange(world) // local_world
        local = rank_host == host
        step = np.broadcast_to(np.arange(reads, dtype=np.int64), (world, reads))
        rank = np.broadcast_to(np.arange(world, dtype=np.int64)[:, None], (world, reads))
        own = np.broadcast_to(local[:, None], (world, reads))
        arrival = own & (homes != host)
        serve = ~own & (homes == host)
        kinds = [(SERVE, serve, -window), (ARRIVAL, arrival, -window), (OWN, own, 0)]
        parts = []
        for kind, mask, shift in kinds:
            parts.append((np.full(int(mask.sum()), kind, np.int64), step[mask] + shift,
                          rank[mask], step[mask], orders[mask]))
        kind, event_step, event_rank, event_read, ids = (np.concatenate(c) for c in zip(*parts))
        order = np.lexsort((event_rank, kind, event_step))
        kind, event_rank, event_read, ids = kind[order], event_rank[order], event_read[order], \
            ids[order]
        self.ids = ids
        self.steps = event_step[order]
        positions = np.arange(len(ids), dtype=np.int64)
        self.own_positions = np.full((world, reads), -1, np.int64)
        self.serve_position = np.full((world, reads), -1, np.int64)
        arrival_at = np.full((world, reads), -1, np.int64)
        for k, table in ((OWN, self.own_positions), (SERVE, self.serve_position),
                         (ARRIVAL, arrival_at)):
            m = kind == k
            table[event_rank[m], event_read[m]] = positions[m]
        # per position: the rank whose read this host serves there, else -1
        self.serve_rank = np.where(kind == SERVE, event_rank, -1).astype(np.int32)
        self.own_positions = self.own_positions[local]
        m = kind == ARRIVAL
        r, i = event_rank[m], event_read[m]
        self.arrivals = (positions[m], self.own_positions[r - host * local_world, i], ids[m],
                         ids[m] % hosts, r, i)
        self.dataset_size = dataset_size
        self.store_size = dataset_size + len(self.arrivals[0])
        self.store_ids = ids.copy()
        own_ids = dataset_size + np.arange(len(self.arrivals[0]), dtype=np.int64)
        self.store_ids[self.arrivals[0]] = own_ids
        self.store_ids[self.arrivals[1]] = own_ids

    def __len__(self):
        return len(self.ids)

    def resume_position(self, read):
        """Where a run that resumes at every rank's read `read` (lockstep:
        the same for all) starts in this plan: the serves and arrivals for
        reads from `read` on come `window` steps before them."""
        return int(np.searchsorted(self.steps, read - self.window))

    def passed_own_positions(self, read):
        """The own reads planned from resume_position(read) on that were
        read before `read`: a resumed run passes them."""
        start = self.resume_position(read)
        own = self.own_positions[:, :read].reshape(-1)
        return np.sort(own[own >= start])

    def steps_span(self, steps):
        """About how many positions `steps` lockstep reads take here."""
        return max(1, int(np.ceil(len(self.ids) / max(1, self.reads) * steps)))


def rank_orders(sampler, world, epochs, epoch_length):
    """int64 [world, epochs * epoch_length]: every rank's reads of a
    DistributedSampler-like `sampler` (its order follows from rank and
    epoch), every epoch one after another."""
    from ._epochs import rank_epoch
    orders = np.empty((world, epochs * epoch_length), np.int64)
    for r in range(world):
        for e in range(epochs):
            ids = np.asarray(rank_epoch(sampler, r, e), dtype=np.int64)
            if len(ids) != epoch_length:
                raise ValueError(f"rank {r}'s epoch {e} has {len(ids)} indices, not "
                                 f"{epoch_length}: a cluster store needs equal epoch lengths")
            orders[r, e * epoch_length:(e + 1) * epoch_length] = ids
    return orders
