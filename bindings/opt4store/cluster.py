"""Many hosts, one cache: ``Store(path, ..., shared="cluster")`` (issue 16).

The same call on every rank of a torch.distributed job. The local ranks of
a host share one store as with ``shared="local"`` (local rank 0 owns it);
the hosts' stores act as one cache:

- Item x's home is host x % hosts. Every host records every rank's order
  (from the DistributedSampler's seed) and plans its store with the host
  plan of opt4store/_cluster_plan.py: its own reads, the reads of its home
  items by other hosts (served a window ahead), and the arrivals of the
  items it reads whose home is elsewhere. The store's OPT over the host's
  budget then keeps the home items it serves and reads soonest, and each
  arrival until its read.
- Each host's owner runs a peer server (a thread per other host: it reads
  the requested home items from its store at their serve positions, loads a
  miss from its own dataset and Puts it, and sends the bytes) and a peer
  prefetcher (a thread that walks the host's arrivals a window ahead of the
  readers' frontier, or of the run's start until they read an arrival,
  asks each home host for a batch, and Puts the replies
  into the local store). Readers (the owner, DataLoader workers forked or
  spawned, other local ranks) wait for an arrival, then read it as a RAM hit.
- Transport: torch.distributed send/recv of int64 headers and uint8 bytes on
  a gloo group of its own (dist.new_group), so training's collectives are
  not disturbed. The bytes are the store's encoded values: bit-exact.
- A peer that fails (its connection closes) or does not answer within
  ``peer_timeout`` seconds is gone: a warning names it, its items are
  loaded from the source, and the positions it would have asked for are
  passed; the epoch finishes with every value right.
- Then the survivors re-place its items among themselves:
  opt4store/_cluster_heirs.py names the rules and what they assume.

An arrival and its read carry an id of their own in the host's store
(opt4store/_cluster_plan.py): readers turn a read's (position, index) into
it (ClusterReader.store_ids). What the host's processes share lives in
files in /dev/shm (opt4store/_cluster_reader.py): the state, a flag per lost
host and per arrival whether it came, so that any reader knows when to stop
waiting; and the readers' part of the host plan, which only the owner
builds. The peer
counters (peer_hits, peer_bytes_in, peer_bytes_out) are the store's own, in
its stats table (Store.count_peer_traffic).
"""

import atexit
import os
import queue
import threading
import time
import warnings
from datetime import timedelta

import numpy as np
import torch

from . import _core, _values
from ._cluster_heirs import Heirs
from ._cluster_identity import check_agreement, plan_identity, save_plan, stale_plan
from ._cluster_plan import HostPlan, rank_orders, search
from ._cluster_reader import ClusterReader, create_host_files, remove_orphans, state_path
from ._errors import InvalidArgumentError

_REQUEST, _BYE, _REPLY = 1, 2, 3
_TAG_REQUEST, _TAG_REPLY = 71, 72
_NO_POSITION = _core.NO_POSITION


def raw_value(value):
    """(meta bytes, uint8 numpy payload) of a value as the store holds it:
    a Get's result (a tensor, or (tag, meta, payload)) or a value loaded
    from the dataset."""
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], bytes) and \
            isinstance(value[2], torch.Tensor):
        return value[1], value[2].numpy()
    if _values.plain_tensor(value):  # as Store.put
        t = value.detach().cpu().resolve_conj().resolve_neg().contiguous()
        meta = _core.encode_header(_values.TORCH_DTYPE_NAMES[t.dtype], list(t.shape),
                                   _values.TAG_TENSOR, b"")
        payload = t.reshape(-1).view(torch.uint8).numpy() if t.numel() \
            else np.empty(0, np.uint8)
        return meta, payload
    meta, payload = _values.encode(value)
    return meta, np.asarray(payload, dtype=np.uint8).reshape(-1)


class ClusterPeer:
    """The owner's peer server and prefetcher (see the module's docstring)."""

    def __init__(self, store, core, plan, group, rank, local_world, state, source, peer_timeout,
                 batch, start=0, epoch_length=1, budget=(0, False)):
        import torch.distributed as dist
        self.dist, self.store, self.core, self.plan = dist, store, core, plan
        self.group, self.rank, self.local_world = group, rank, local_world
        self.state, self.source = state, source
        self.peer_timeout, self.batch = peer_timeout, batch
        self.first_position = start  # where a resumed run starts in the plan
        self._skip_to = None  # a later start: skip_to
        self.host = plan.host
        self.peers = [g * local_world for g in range(plan.hosts) if g != plan.host]
        self.lost = {}  # host -> message
        # the survivors' residency after a loss (opt4store/_cluster_heirs.py)
        self.heirs = Heirs(plan, epoch_length, budget, lambda item: raw_value(source[item]))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._servers = [threading.Thread(target=self._serve, args=(peer,), daemon=True,
                                          name=f"opt4store-peer-server-{peer}")
                         for peer in self.peers]
        # Replies come in on a thread per peer too: a gloo wait that times
        # out breaks every connection of the group, so no wait has a
        # timeout; the prefetcher waits on these queues instead.
        # Requests go out on a thread per peer as well: a send to a stalled
        # peer blocks (gloo waits for its matching receive).
        self._replies = {peer: queue.Queue() for peer in self.peers}
        self._requests = {peer: queue.Queue() for peer in self.peers}
        self._receivers = [threading.Thread(target=self._receive_replies, args=(peer,),
                                            daemon=True, name=f"opt4store-peer-replies-{peer}")
                           for peer in self.peers]
        self._senders = [threading.Thread(target=self._send_requests, args=(peer,),
                                          daemon=True, name=f"opt4store-peer-requests-{peer}")
                         for peer in self.peers]
        self._prefetcher = threading.Thread(target=self._prefetch, daemon=True,
                                            name="opt4store-peer-prefetcher")
        self.errors = []
        self._closed = False
        self._frontier, self._moved_at = None, time.monotonic()  # for _watch

    def skip_to(self, position):
        """The prefetcher goes on from the arrivals at `position` of the plan
        (a resume after the store was planned): the earlier ones are past."""
        self._skip_to = position

    def start(self):
        # A DataLoader worker forked beside these threads inherits any lock
        # of the C library one of them holds then (bindings/README.md). The
        # one a worker was seen blocked on: torch registers an exit handler
        # the first time a process makes a shared-memory handle. Made here,
        # before the threads start, a forked worker inherits it made.
        torch.empty(1).share_memory_()
        for t in self._servers + self._receivers + self._senders:
            t.start()
        self._prefetcher.start()

    # ---- losing a peer

    def lose(self, host, error):
        """Host `host` is gone: flag it for every reader, warn once, and pass
        the positions at which this host would have served it."""
        with self._lock:
            if host in self.lost:
                return
            since = self.heirs.lose(host, self._reading_step() + self.plan.window)
            message = (f"opt4store: cluster peer host {host} (rank {host * self.local_world}) "
                       f"is lost: {error}; its items are loaded from the source until epoch "
                       f"{since}, then from their new homes among the other hosts")
            self.lost[host] = message
            self.state.gone[host] = 1 + since
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        ranks = range(host * self.local_world, (host + 1) * self.local_world)
        positions, _, _ = self.plan.serve_positions(ranks)
        frontier = self.core.reading_from()
        if frontier != _NO_POSITION:
            positions = positions[positions >= frontier]
        for position in positions.tolist():
            self.core.mark_consumed(position, int(self.plan.store_ids[position]))

    # ---- the server: one thread per peer

    def _serve(self, peer):
        dist, group = self.dist, self.group
        header = torch.zeros(4, dtype=torch.int64)
        try:
            while True:
                dist.recv(header, src=peer, group=group, tag=_TAG_REQUEST)
                kind, count = int(header[0]), int(header[1])
                if kind == _BYE:  # answered in kind: the peer's reply thread ends
                    dist.send(torch.tensor([_BYE, 0, 0, 0], dtype=torch.int64), dst=peer,
                              group=group, tag=_TAG_REPLY)
                    return
                body = torch.empty((count, 2), dtype=torch.int64)
                dist.recv(body, src=peer, group=group, tag=_TAG_REQUEST)
                self._answer(peer, body.numpy())
        except Exception as e:  # the connection to the peer broke
            if not self._stop.is_set() or peer // self.local_world not in self.lost:
                self.lose(peer // self.local_world, f"{type(e).__name__}: {e}")

    def _answer(self, peer, requests):
        metas, payloads, table = [], [], np.zeros((len(requests), 3), np.int64)
        for k, (rank, read) in enumerate(requests.tolist()):
            position = self.plan.serve_position(rank, read)
            index = int(self.plan.item_at([position])[0]) if position >= 0 else -1
            try:
                if position < 0:
                    meta, payload = self.heirs.serve(rank, read, self._floor())
                else:
                    value = self.core.get(position, index)
                    if value is None:
                        value = self.source[index]
                        self.store.put(position, index, value)
                    meta, payload = raw_value(value)
            except Exception as e:  # the requester loads it itself
                self.errors.append(f"{type(e).__name__}: {e}")
                table[k, 0] = 1
                continue
            metas.append(meta)
            payloads.append(payload)
            table[k, 1:] = (len(meta), len(payload))
        # meta then payload, item after item, as the table lists them
        parts = [part for meta, payload in zip(metas, payloads)
                 for part in (np.frombuffer(meta, np.uint8), payload)]
        blob = np.concatenate(parts) if parts else np.empty(0, np.uint8)
        header = torch.tensor([_REPLY, len(requests), len(blob), 0], dtype=torch.int64)
        self.dist.send(header, dst=peer, group=self.group, tag=_TAG_REPLY)
        self.dist.send(torch.from_numpy(table), dst=peer, group=self.group, tag=_TAG_REPLY)
        if len(blob):
            self.dist.send(torch.from_numpy(blob), dst=peer, group=self.group, tag=_TAG_REPLY)
        self.core.count_peer_traffic(bytes_out=len(blob))

    def _reading_step(self):
        """The read step of this store's frontier."""
        position = self.core.reading_from()
        position = 0 if position == _NO_POSITION else position
        return self.plan.step_at(min(position, len(self.plan) - 1))

    def _floor(self):
        """Uses of inherited items an epoch before this store's frontier
        are past (Heirs): hosts in lockstep ask within a few batches of each
        other, workers and prefetch included."""
        return self._reading_step() - self.heirs.epoch_length

    # ---- the prefetcher

    def _prefetch(self):
        try:
            self._prefetch_all()
            while not self._stop.wait(0.05):
                self._watch()
        except Exception as e:  # pragma: no cover - reported at close
            self.errors.append(f"prefetcher: {type(e).__name__}: {e}")
        finally:
            for peer in self.peers:
                self._requests[peer].put(None)  # goodbye

    def _prefetch_all(self):
        at, reads_at, ids, homes, ranks, reads = self.plan.arrivals
        # Up to a window past the frontier, or past the furthest read a
        # reader waits for (a batch holds its positions until all of it is
        # read; workers read batches ahead): with arrivals a window before
        # their reads, about two windows of them are held past the readers
        # (the room the store was given), and no two hosts wait on each other.
        gate = self.plan.steps_span(self.plan.window)
        start = self.first_position
        k, n = int(search(at, start)), len(at)
        while k < n and not self._stop.is_set():
            # The frontier before the skip: a replan sets the skip, then moves
            # the frontier. Read after the skip, a frontier already moved
            # let a batch of the skipped arrivals through (1 past the bound
            # in test_resume_mid_epoch_2_reads_on_from_the_checkpoint, 2026-11-27).
            frontier = self.core.reading_from()
            skip, self._skip_to = self._skip_to, None
            if skip is not None:
                start = max(start, skip)
                k = max(k, int(search(at, skip)))
                continue
            wanted = int(self.state.wanted[0])
            # Until this host's readers have read an arrival, the run's start
            # paces the prefetch, not the frontier: the peers' serve reads move
            # it too, and a host whose peers resumed first would fetch, before
            # its own load_state_dict, arrivals its readers then skip (1 past
            # the same bound in a CI run, 2026-11-27 22:50 UTC).
            if wanted > 0:
                base = max(0 if frontier == _NO_POSITION else frontier, wanted)
            else:
                base = start
            limit = base + gate
            end = k
            while end < n and end - k < self.batch and at[end] <= limit:
                end += 1
            if end == k:
                self._watch()
                time.sleep(0.0005)
                continue
            chunk = np.arange(k, end)
            now = self.heirs.home(ids[chunk], reads[chunk])  # a lost host's items: their new homes
            asked = []
            for home in np.unique(now).tolist():
                mine = chunk[now == home]
                if home == self.host:
                    self.heirs.arrive(self.core, self.state, mine, self._floor(),
                                      self.errors)
                    continue
                if home < 0 or self.state.gone[home] or \
                        not self._ask(home, ranks[mine], reads[mine]):
                    self._give_up(mine)
                    continue
                asked.append((home, mine))
            for home, mine in asked:
                self._receive(home, mine)
            k = end

    def _watch(self):
        """A peer that stalls (alive, but asking for nothing) holds this
        store's frontier at a position it would be served at: past
        peer_timeout it is lost, and the frontier moves on."""
        frontier, now = self.core.reading_from(), time.monotonic()
        if frontier != self._frontier:
            self._frontier, self._moved_at = frontier, now
            return
        if now - self._moved_at <= self.peer_timeout or frontier == _NO_POSITION or \
                frontier >= len(self.plan):
            return
        rank = self.plan.served_rank(frontier)
        if rank >= 0 and not self.state.gone[rank // self.local_world]:
            self.lose(rank // self.local_world,
                      f"it asked for nothing for {self.peer_timeout:g} s (peer_timeout): stalled")
        self._moved_at = now

    def _ask(self, home, ranks, reads):
        peer = home * self.local_world
        self._requests[peer].put(np.stack([ranks, reads], axis=1).astype(np.int64))
        return True

    def _send_requests(self, peer):
        """Sends the requests queued for `peer`, then its goodbye (None)."""
        requests = self._requests[peer]
        while True:
            body = requests.get()
            if peer // self.local_world in self.lost:
                return
            try:
                if body is None:
                    self.dist.send(torch.tensor([_BYE, 0, 0, 0], dtype=torch.int64), dst=peer,
                                   group=self.group, tag=_TAG_REQUEST)
                    return
                self.dist.send(torch.tensor([_REQUEST, len(body), 0, 0], dtype=torch.int64),
                               dst=peer, group=self.group, tag=_TAG_REQUEST)
                self.dist.send(torch.from_numpy(body), dst=peer, group=self.group,
                               tag=_TAG_REQUEST)
            except Exception as e:
                self._replies[peer].put(e)
                return

    def _receive_replies(self, peer):
        """Receives `peer`'s replies, in order, into its queue (an exception
        when the connection breaks), until its goodbye."""
        dist, group, replies = self.dist, self.group, self._replies[peer]
        try:
            while True:
                header = torch.zeros(4, dtype=torch.int64)
                dist.recv(header, src=peer, group=group, tag=_TAG_REPLY)
                if int(header[0]) == _BYE:
                    return
                table = torch.zeros((int(header[1]), 3), dtype=torch.int64)
                dist.recv(table, src=peer, group=group, tag=_TAG_REPLY)
                blob = torch.empty(int(header[2]), dtype=torch.uint8)
                if len(blob):
                    dist.recv(blob, src=peer, group=group, tag=_TAG_REPLY)
                replies.put((table.numpy(), blob.numpy()))
        except Exception as e:
            replies.put(e)

    def _receive(self, home, mine):
        at, first = self.plan.arrivals[0], self.plan.dataset_size
        peer = home * self.local_world
        try:
            reply = self._replies[peer].get(timeout=self.peer_timeout)
        except queue.Empty:
            reply = f"no reply within peer_timeout={self.peer_timeout:g} s: stalled"
        if not isinstance(reply, tuple):
            if isinstance(reply, Exception):
                reply = f"{type(reply).__name__}: {reply}"
            self.lose(home, reply)
            self._give_up(mine)
            return
        table, blob = reply
        offset, hits = 0, 0
        for k, j in enumerate(mine.tolist()):
            position, store_id = int(at[j]), first + j
            failed, meta_len, payload_len = table[k].tolist()
            if not failed:
                meta = blob[offset:offset + meta_len].tobytes()
                payload = blob[offset + meta_len:offset + meta_len + payload_len]
                offset += meta_len + payload_len
                try:
                    self.core.put_encoded(position, store_id, meta, payload)
                except Exception as e:
                    self.errors.append(f"{type(e).__name__}: {e}")
            self.core.mark_consumed(position, store_id)
            held = not failed and int(self.core.locate(np.array([store_id]))[0]) != 0
            hits += held
            self.state.arrived[j] = 1 if held else 2
        # One count per reply: offset is the bytes of the values that came.
        self.core.count_peer_traffic(hits=hits, bytes_in=offset)

    def _give_up(self, mine):
        at, first = self.plan.arrivals[0], self.plan.dataset_size
        for j in mine.tolist():
            self.core.mark_consumed(int(at[j]), first + j)
            self.state.arrived[j] = 2

    # ---- closing

    def _lost_ranks(self):
        return {str(host * self.local_world) for host in self.lost}

    def close(self):
        """Stops asking, says goodbye to the peers, and serves them until each
        has said goodbye too (or is lost). A peer still being served (this
        store's frontier moves) is waited for; the wait ends once no peer was
        served for twice peer_timeout (a live peer may itself wait
        peer_timeout for a lost one before it asks again). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._prefetcher.join()
        frontier, moved_at = self.core.reading_from(), time.monotonic()
        for t in self._senders + self._servers + self._receivers:
            while t.is_alive() and t.name.rsplit("-", 1)[1] not in self._lost_ranks():
                t.join(0.05)
                now, at = time.monotonic(), self.core.reading_from()
                if at != frontier:
                    frontier, moved_at = at, now
                elif now - moved_at > 2 * self.peer_timeout:
                    break
        waiting = [t.name for t in self._servers + self._receivers
                   if t.is_alive() and t.name.rsplit("-", 1)[1] not in self._lost_ranks()]
        if waiting:
            warnings.warn(f"opt4store: closing while cluster peers still read ({waiting})",
                          RuntimeWarning, stacklevel=3)


class ClusterSharing:
    """How a Store with ``shared="cluster"`` binds (Store.bind calls
    connect): every rank records every rank's order and computes its host's
    plan; local rank 0 opens and plans the store (through LocalSharing, as
    shared="local"), and runs the peer threads."""

    def __init__(self, local, window, peer_timeout, batch):
        self.local = local
        self.window, self.peer_timeout, self.batch = window, peer_timeout, batch
        self.reader = None
        self.peer = None
        self.plan = None

    def connect(self, store, open_core, dataset_size, sampler, source):
        """Binds `store` (Store.bind calls it): open_core(extra_ram_items)
        opens the owner's core. Returns (core, owner)."""
        from .distributed import _process_group
        dist = _process_group()
        if dist is None:
            raise InvalidArgumentError("shared='cluster' needs an initialized torch.distributed "
                                       "process group (the same call on every rank)")
        if sampler is None or getattr(sampler.sampler, "num_replicas", None) is None:
            raise InvalidArgumentError("shared='cluster' needs a PlannedSampler over a "
                                       "DistributedSampler, to know every rank's order")
        if source is None:
            raise InvalidArgumentError("shared='cluster' needs the dataset (bind through "
                                       "CachedDataset): the home host loads what it serves")
        local_rank, local_world = self.local.layout()
        # The budget, before the room for arrivals is added: a survivor's
        # share of a lost host's (InheritedItems) is counted in its units.
        budget = store.ram_budget()
        world, rank = dist.get_world_size(), dist.get_rank()
        if world % local_world or sampler.sampler.num_replicas != world or \
                sampler.sampler.rank != rank:
            raise InvalidArgumentError(
                f"shared='cluster': the DistributedSampler's rank {sampler.sampler.rank} of "
                f"{sampler.sampler.num_replicas} is not this process's rank {rank} of {world} "
                f"(hosts of {local_world} local ranks)")
        hosts, host = world // local_world, rank // local_world
        # Every rank joins the group, in the same order; only owners use it.
        # No timeout of its own: a server waits for requests as long as the
        # run lasts; peer_timeout bounds the waits for replies (_recv) and
        # the silence of a peer (_watch).
        group = dist.new_group(backend="gloo", timeout=timedelta(days=7))  # < 2**31 ms
        # Every rank's plan the same, every host's store filled for it (or
        # new): checked by all ranks at once, so that all raise alike.
        identity = plan_identity(sampler, dataset_size, world, local_world, self.window)
        stale = stale_plan(store.path, identity) if local_rank == 0 and store.path else None
        gathered = [None] * world
        dist.all_gather_object(gathered, (identity, stale), group=group)
        check_agreement(gathered, stale, store.path)
        # A sampler that load_state_dict moved resumes every rank at the same
        # read (one checkpoint, lockstep).
        resume = sampler.position()
        state_box = {}

        def open_owner():
            orders = rank_orders(sampler.sampler, world, sampler.epochs, sampler.epoch_length)
            self.plan = plan = HostPlan(orders, host, hosts, local_world, self.window,
                                        dataset_size)
            # Room for the arrivals in flight (up to two windows ahead) on
            # top of a budget in items; a byte budget keeps them in staging.
            core = open_core(2 * self.window * local_world, plan.store_size)
            save_plan(store.path, identity)
            self._plan_core(core, resume)
            path = state_path(core.handle())
            remove_orphans()
            try:
                state_box["state"] = create_host_files(path, plan, sampler.epoch_length, hosts)
            except Exception:
                core.close()
                raise
            return core

        # The other local ranks check the store's size through the reader.
        core, owner = self.local.connect(open_owner, None, sampler.check_shareable)
        self.reader = ClusterReader(state_path(core.handle()), host, hosts, dataset_size,
                                    self.peer_timeout)
        held = core.dataset_size() - len(self.reader.arrival_reads)
        if held != dataset_size:
            core.close()
            raise InvalidArgumentError(f"local rank 0's cluster store holds a dataset of {held} "
                                       f"items; this rank's dataset has {dataset_size}")
        sampler.use_positions(self.reader.own_positions[local_rank],
                              replan=(lambda read: self._replan(core, read)) if owner else None,
                              store=store)
        if owner:
            # What the readers' files hold is read through them from now on.
            self.plan.use_mapped(self.reader.own_positions, self.reader.arrival_reads,
                                 self.reader.arrival_items)
            self.peer = ClusterPeer(store, core, self.plan, group, rank, local_world,
                                    state_box["state"], source, self.peer_timeout, self.batch,
                                    self.plan.resume_position(resume),
                                    sampler.epoch_length, budget)
            self.peer.start()
            # A process that exits without Store.close() still says goodbye
            # and serves its peers until they are done: a peer thread left
            # blocked in a receive would abort the interpreter's exit. Then
            # its files in /dev/shm go (not a forked child's exit).
            pid = os.getpid()
            atexit.register(lambda: os.getpid() == pid and self.remove_state())
            atexit.register(self.peer.close)
        return core, owner

    def _plan_core(self, core, read):
        """Plans the host's store from own read `read` on (every rank
        resumes at the same read: one checkpoint, lockstep): from the serves
        and arrivals for that read, passing the own reads before it that
        fall among them."""
        plan = self.plan
        core.set_plan([plan.store_ids], len(plan), plan.resume_position(read),
                      0, 0)
        for position in plan.passed_own_positions(read).tolist():
            core.mark_consumed(position, int(plan.store_ids[position]))

    def _replan(self, core, read):
        """load_state_dict after binding (most scripts load a checkpoint
        after building the dataset): the store and its prefetcher start
        again at own read `read`. The prefetcher is told first: the new
        plan moves the store's frontier far ahead, and a prefetcher that
        saw it before its skip fetched the arrivals up to it (75 in a CI
        run under load, where a window's 21 were allowed)."""
        self.peer.skip_to(self.plan.resume_position(read))
        self._plan_core(core, read)

    def close(self):
        if self.peer is not None:
            self.peer.close()

    def remove_state(self):
        if self.peer is not None:
            self.peer.state.remove()
