"""A lost cluster host's items, re-placed among the survivors
(Store(..., shared="cluster"), issue 16; see opt4store/cluster.py).

A host that is lost (cluster.py: its connection broke, or it stalled past
peer_timeout) has its items loaded from the source at once. Then the
survivors' residency is recomputed. The rules, and what they assume:

* New homes: _cluster_plan.home_of. Every host computes the same homes
  from the same lost set, with no messages; a lost host's items spread
  evenly over the others; a second loss moves only the items whose home
  that host was (its own and those it had inherited), so the rule
  composes for any number of losses.
* When: a host applies a loss from the first epoch after the one its
  readers were in when it detected it (the next epoch boundary). Hosts
  that detect a loss in different epochs disagree for an epoch; nobody
  waits on that: a host asked for an item it is not the home of (by its
  own view) answers "not here", and a host whose view still has the lost
  home takes the item from the source. Values stay right throughout; a
  disagreement costs source loads, never a wrong value or a wait. "The
  epoch its readers were in" is its store's frontier, plus a window: its
  prefetcher and DataLoader workers run further ahead, so an arrival it
  already gave up for is loaded from the source, and near an epoch's end
  hosts may disagree (with 2 workers a host, one run here: every host
  chose the same epoch and 3 of host 3's items were loaded twice; another,
  one host chose the next epoch, and about 40 were).
* Where: the new home keeps an inherited item as its own, in the owner's
  memory beside the store (InheritedItems): from its first use to its
  last, by next use over the reads the new view plans for it (its own
  reads and those it serves), loading it from the source once. Its own
  reads of it arrive into its store as a peer's would (same arrival ids,
  no change for the readers); others fetch it from the new home as from
  any home (peer_hits count them). That memory is the lost hosts'
  budgets shared among the survivors: ceil(budget * lost / survivors),
  in the store's units (ram_items, or bytes with ram=), on top of the
  store's own budget. The store's own plan is not re-planned: its home
  items keep their places, and the positions it would have served a lost
  host are passed.
  (Replanning the store in place, with the inherited items under its own
  OPT and budget, needs a new host plan from the loss's epoch on: new
  serves and arrivals, and the readers' files rewritten while they read.
  The engine's SetPlan would keep RAM's contents across it.)
* What is assumed: a lost host does not come back within the run: no
  plan counts its reads any more (were it to ask again, the hosts answer
  by id, so its values stay right); the survivors' epochs have equal
  lengths and every rank's order is the one recorded at binding (so every
  host knows which rank reads what in which epoch); a loss is known to a
  host only through its own peer threads (no host tells another).
"""

import heapq
import threading

import numpy as np

from ._cluster_plan import home_of, inherited_uses
from ._errors import InvalidArgumentError


class Heirs:
    """One host's view of the lost hosts (from which epoch it takes each
    one's items from their new homes) and the items it inherited. `plan` is
    the host's HostPlan, `budget` (units, by_bytes) the store's budget,
    `load(item)` the item's (meta, payload) from the source."""

    def __init__(self, plan, epoch_length, budget, load):
        self.plan, self.epoch_length, self.budget = plan, max(1, epoch_length), budget
        self.lost_from = {}  # host -> the first epoch its items have new homes in
        self.items = InheritedItems(load)

    def lose(self, host, read):
        """Host `host` is lost while this host's readers are at read step
        `read`: its items get new homes from the next epoch on. Returns that
        epoch. Not thread-safe: the caller serializes losses."""
        since = read // self.epoch_length + 1
        self.lost_from[host] = since
        units, by_bytes = self.budget
        hosts, lost = self.plan.hosts, len(self.lost_from)
        capacity = -(-units * lost // max(1, hosts - lost))  # the lost budgets, shared
        uses = inherited_uses(self.plan.orders, self.plan.host, hosts, self.plan.local_world,
                              self.lost_at)
        self.items.replan(uses, capacity, by_bytes)
        return since

    def lost_at(self, epoch):
        return {h for h, since in list(self.lost_from.items()) if since <= epoch}

    def home(self, items, reads):
        """The home of each item for the read at step reads[i], as this host
        sees it now (int64)."""
        items, reads = np.asarray(items, np.int64), np.asarray(reads, np.int64)
        homes = items % self.plan.hosts
        epochs = reads // self.epoch_length
        for epoch in np.unique(epochs).tolist():
            lost = self.lost_at(epoch)
            if lost:
                homes[epochs == epoch] = home_of(items[epochs == epoch], self.plan.hosts,
                                                 sorted(lost))
        return homes

    def inherits(self, item, read):
        """Whether this host is the new home of `item` for read step `read`."""
        return item % self.plan.hosts != self.plan.host and \
            int(self.home([item], [read])[0]) == self.plan.host

    def serve(self, rank, read, floor):
        """(meta, payload) for rank `rank`'s read `read` of an item whose
        first home is lost, asked of this host as its new home; raises when
        this host does not see itself as that (the requester then loads the
        item from the source)."""
        item = self.plan.orders.read(rank, read)
        if not self.inherits(item, read):
            raise InvalidArgumentError(f"rank {rank}'s read {read} is not served here")
        return self.items.take(item, read, floor)

    def arrive(self, core, state, mine, floor, errors):
        """This host's arrivals `mine` (indices into plan.arrivals) of items
        it inherited: from its inherited items (or the source, once) into
        its store, as a peer's would come."""
        at, first = self.plan.arrivals[0], self.plan.dataset_size
        items, reads = self.plan.arrivals[2], self.plan.arrivals[5]
        for j in mine.tolist():
            position, store_id = int(at[j]), first + j
            held = False
            try:
                meta, payload = self.items.take(int(items[j]), int(reads[j]), floor)
                core.put_encoded(position, store_id, meta, payload)
                held = int(core.locate(np.array([store_id]))[0]) != 0
            except Exception as e:  # the reader loads it itself
                errors.append(f"{type(e).__name__}: {e}")
            core.mark_consumed(position, store_id)
            state.arrived[j] = 1 if held else 2


class InheritedItems:
    """The items of lost hosts that this host is the new home of (see the
    module's docstring): their values, in the owner, each kept while a use
    (a read by a live rank, its own or one it serves) is still to come, at
    most `capacity` of them (items; bytes when by_bytes), the one used
    furthest ahead leaving first (OPT, with bypass). An item not held is
    loaded from the source, under the lock: two threads that want it at
    once load it once.

    The held items are indexed by next use in two heaps (entries of an
    older version are skipped): the furthest first, for eviction, and the
    soonest first, to find the items whose next use fell behind the floor
    (uses of ranks that never asked), which are re-keyed before a choice.
    So a choice costs O(log held), and each one is OPT's."""

    def __init__(self, load):
        self.load = load  # item -> (meta, payload), from the source
        self.uses = {}    # item -> its remaining use steps, sorted
        self.values = {}  # item -> (meta, payload)
        self.capacity, self.by_bytes, self.held = 0, False, 0
        self.loads = 0    # source loads
        self._lock = threading.Lock()
        self._version = {}  # held item -> the version of its heap entries
        self._furthest = []  # (-next use, version, item)
        self._soonest = []   # (next use, version, item)

    def replan(self, uses, capacity, by_bytes):
        with self._lock:
            self.uses, self.capacity, self.by_bytes = uses, capacity, by_bytes
            for item in list(self.values):
                if self.uses.get(item):
                    self._index(item, -1)
                else:
                    self._drop(item)

    def take(self, item, step, floor):
        """(meta, payload) of `item` for its use at read step `step`; uses
        before read step `floor` are past (a live rank that never asked)."""
        with self._lock:
            steps = self.uses.get(item, [])
            if step in steps:
                steps.remove(step)
            value = self.values.get(item)
            if value is None:
                value = self.load(item)
                self.loads += 1
                self._admit(item, value, floor)
            elif self._next_use(item, floor) is None:
                self._drop(item)
            else:
                self._index(item, floor)
            return value

    def _next_use(self, item, floor):
        steps = self.uses.get(item)
        while steps and steps[0] < floor:
            steps.pop(0)
        return steps[0] if steps else None

    def _cost(self, value):
        return len(value[0]) + len(value[1]) if self.by_bytes else 1

    def _index(self, item, floor):
        """(Re)files held `item` under its next use (NEVER: none)."""
        version = self._version[item] = self._version.get(item, 0) + 1
        key = self._next_use(item, floor)
        key = _NEVER if key is None else key
        heapq.heappush(self._furthest, (-key, version, item))
        heapq.heappush(self._soonest, (key, version, item))

    def _current(self, entry):
        return self._version.get(entry[2]) == entry[1]

    def _furthest_held(self, floor):
        """The held item used furthest ahead, and that use (NEVER: none)."""
        soonest = self._soonest
        while soonest and (not self._current(soonest[0]) or soonest[0][0] < floor):
            entry = heapq.heappop(soonest)
            if self._current(entry):
                self._index(entry[2], floor)  # a use passed: its next is later
        furthest = self._furthest
        while not self._current(furthest[0]):
            heapq.heappop(furthest)
        return furthest[0][2], -furthest[0][0]

    def _drop(self, item):
        self.held -= self._cost(self.values.pop(item))
        del self._version[item]
        if not self.values:  # nothing current left: let the heaps go
            self._furthest, self._soonest = [], []

    def _admit(self, item, value, floor):
        upcoming = self._next_use(item, floor)
        cost = self._cost(value)
        if upcoming is None or cost > self.capacity:
            return
        while self.held + cost > self.capacity:
            victim, far = self._furthest_held(floor)
            if far <= upcoming:
                return  # every resident is used sooner: bypass
            self._drop(victim)
        self.values[item] = value
        self.held += cost
        self._index(item, floor)


_NEVER = float("inf")
