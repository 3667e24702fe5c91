"""What every process of a cluster host needs to read its store
(Store(..., shared="cluster"); opt4store/cluster.py): the host's shared
state and the readers' part of its plan, both files in /dev/shm beside
each other, and ClusterReader, which turns a read into the store's id and
waits for an arrival.

Only the host's owner (local rank 0) builds the host plan
(opt4store/_cluster_plan.py: from every rank's order, an epoch at a time;
about 7 bytes a read of the cluster with 8 hosts). It writes what readers
need, the own reads' positions of every local rank and the arrivals'
reads, items and homes, as .npy files; the other local ranks and every
DataLoader worker map them read-only, so a host holds one plan, not one
per process.
"""

import errno
import glob
import hashlib
import os
import time
import warnings

import numpy as np

from ._cluster_plan import index_dtype, search
from ._errors import IOError_, NoSpaceError
from .distributed import remove_files_of_gone, shared_folder, user_prefix

# The readers' part of the host plan: file suffix -> what it holds.
_READER_PLAN = ("own", "arrival_reads", "arrival_items", "arrival_homes", "arrival_epochs")


def state_path(handle):
    """The state file of the host whose store has this handle (the store's
    control block's name, "/opt4store-ctl.<owner pid>.<n>"): the owner's
    pid is in its name, for remove_orphans."""
    key = hashlib.sha1(handle.encode()).hexdigest()[:16]
    pid = handle.rsplit(".", 2)[-2] if handle.count(".") >= 2 else "0"
    return os.path.join(shared_folder(), f"{user_prefix()}cluster-{pid}-{key}.state")


def remove_orphans():
    """Removes the files of cluster hosts whose owner process is gone (a
    host killed before its close): the readers' plan can be large."""
    prefix = f"{user_prefix()}cluster-"

    def owner_of(name):
        pid = name[len(prefix):].split("-", 1)[0]
        return (int(pid), None) if pid.isdigit() else None
    remove_files_of_gone(shared_folder(), prefix, owner_of)


def _reader_arrays(plan, epoch_length):
    """The readers' part of HostPlan `plan`, in _READER_PLAN's order, in
    the plan's own (32-bit where they fit) dtypes, the arrivals' homes and
    epochs in 16 bits where they fit."""
    _, reads, items, homes, _, read_index = plan.arrivals
    epochs = read_index // max(1, epoch_length)
    return (plan.own_positions, reads, items, homes.astype(index_dtype(plan.hosts, np.int16)),
            epochs.astype(index_dtype(int(epochs.max()) + 1 if len(epochs) else 0, np.int16)))


def state_bytes(hosts, arrivals):
    """The size of a host's state file (ClusterState)."""
    return (1 + hosts) * 8 + arrivals


def write_reader_plan(path, plan, epoch_length):
    """Writes the readers' part of HostPlan `plan` beside state file `path`
    (the owner, before any reader attaches)."""
    for name, array in zip(_READER_PLAN, _reader_arrays(plan, epoch_length)):
        temporary = f"{path}.{name}.{os.getpid()}.tmp.npy"
        np.save(temporary, np.ascontiguousarray(array))
        os.replace(temporary, f"{path}.{name}.npy")


def create_host_files(path, plan, epoch_length, hosts):
    """Writes the readers' plan beside state file `path` and creates the
    state (the owner, before any reader attaches); returns the
    ClusterState. A folder too small for them (/dev/shm) raises
    NoSpaceError naming the room they need, any other refusal IOError_;
    either way no file of theirs is left behind."""
    try:
        write_reader_plan(path, plan, epoch_length)
        return ClusterState(path, hosts, len(plan.arrivals[0]), create=True)
    except OSError as e:
        remove_files(path)
        for name in glob.glob(f"{glob.escape(path)}*.{os.getpid()}.tmp*"):
            os.remove(name)
        need = sum(a.nbytes for a in _reader_arrays(plan, epoch_length)) + \
            state_bytes(hosts, len(plan.arrivals[0]))
        folder = os.statvfs(os.path.dirname(path) or ".")
        full = e.errno in (errno.ENOSPC, errno.EDQUOT) or \
            folder.f_bavail * folder.f_frsize < need  # numpy's short writes carry no errno
        kind = NoSpaceError if full else IOError_
        raise kind(f"the cluster host's plan for its readers and its state (about "
                   f"{need / 2**20:.1f} MiB) do not fit in {os.path.dirname(path)}: "
                   f"{e.strerror or e}. Give it more room (a container's --shm-size), or plan "
                   "fewer epochs (PlannedSampler's epochs=)") from e


def read_reader_plan(path):
    """{name: read-only mapped array} of write_reader_plan's files."""
    return {name: np.load(f"{path}.{name}.npy", mmap_mode="r") for name in _READER_PLAN}


def remove_files(path):
    """The state file and the readers' plan (the owner, at close)."""
    for name in [path] + [f"{path}.{name}.npy" for name in _READER_PLAN]:
        try:
            os.remove(name)
        except FileNotFoundError:
            pass


class ClusterState:
    """The host's shared state (see opt4store/cluster.py): int64 words, the
    highest read position a reader waits for an arrival at and, per host, 0
    (alive) or 1 + the epoch its items have new homes from (lost); then a
    byte per arrival, 0 (not yet), 1 (in the store) or 2 (load it from the
    source). Each value has one writer, a plain store the others read."""

    def __init__(self, path, hosts, arrivals, create=False):
        self.path, self.hosts, self.arrivals = path, hosts, arrivals
        words = 1 + hosts
        if create:
            # Zeros written, not a sparse file: a /dev/shm too small fails
            # here, not with SIGBUS at a reader's first touch of a page.
            temporary = f"{path}.{os.getpid()}.tmp"
            np.zeros(state_bytes(hosts, arrivals), np.uint8).tofile(temporary)
            os.replace(temporary, path)
        self.words = np.memmap(path, dtype=np.int64, mode="r+", shape=(words,))
        self.wanted = self.words[0:1]
        self.gone = self.words[1:1 + hosts]
        self.arrived = np.memmap(path, dtype=np.uint8, mode="r+", offset=words * 8,
                                 shape=(arrivals,)) if arrivals else np.zeros(0, np.uint8)

    def remove(self):
        remove_files(self.path)


class ClusterReader:
    """What every process of a host needs to read a cluster store: the ids
    its reads have in the store, and how to wait for an arrival. Picklable
    (a spawned DataLoader worker maps the state and the plan's files
    again by their path)."""

    def __init__(self, state_path, host, hosts, dataset_size, peer_timeout):
        self.state_path, self.host, self.hosts = state_path, host, hosts
        self.dataset_size, self.peer_timeout = dataset_size, peer_timeout
        self.late = 0  # arrivals this process gave up waiting for
        self._map()

    def _map(self):
        plan = read_reader_plan(self.state_path)
        self.own_positions = plan["own"]
        # Per arrival: the position of its read, its item, the item's home
        # and the epoch of its read.
        self.arrival_reads = plan["arrival_reads"]
        self.arrival_items = plan["arrival_items"]
        self.arrival_homes = plan["arrival_homes"]
        self.arrival_epochs = plan["arrival_epochs"]
        self.state = ClusterState(self.state_path, self.hosts, len(self.arrival_reads))

    def __getstate__(self):
        return {k: self.__dict__[k] for k in ("state_path", "host", "hosts", "dataset_size",
                                              "peer_timeout", "late")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._map()

    def store_ids(self, positions, indices):
        """The store's ids of the reads (positions[i], indices[i]): an own
        read of another host's item at its planned position reads its
        arrival's id; any other read (another position, or an index the plan
        did not predict there) the item's. An int64 array."""
        positions = np.asarray(positions, dtype=np.uint64).reshape(-1)
        ids = np.array(indices, dtype=np.int64).reshape(-1)
        reads = self.arrival_reads
        if len(reads):
            k = np.minimum(search(reads, positions), len(reads) - 1)
            positions = positions.astype(np.int64)  # the compare below, exactly
            mine = (reads[k] == positions) & (self.arrival_items[k] == ids)
            ids[mine] = self.dataset_size + k[mine]
        return ids

    def await_arrivals(self, ids):
        """Waits until each arrival among the store `ids` has come (or will
        not: its home is gone, or it was refused); a Get then finds it, or
        the reader loads it from the source."""
        arrived, gone = self.state.arrived, self.state.gone
        waited = [i - self.dataset_size for i in np.asarray(ids).tolist()
                  if i >= self.dataset_size]
        if waited:  # tell the prefetcher how far readers are (a batch, workers ahead)
            last = int(self.arrival_reads[max(waited)])
            if last > self.state.wanted[0]:
                self.state.wanted[0] = last
        deadline = None
        for store_id in np.asarray(ids).tolist():
            k = store_id - self.dataset_size
            if k < 0:
                continue
            pause = 0.0002
            while arrived[k] == 0 and not self.from_source(k, gone):
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.peer_timeout
                if now > deadline:
                    self.late += 1
                    if self.late == 1:
                        warnings.warn(
                            f"opt4store: an item from cluster host {self.home_of_arrival(k)} "
                            f"did not arrive within {self.peer_timeout:.0f} s; loading it "
                            "from the source", RuntimeWarning, stacklevel=4)
                    break
                time.sleep(pause)
                pause = min(pause * 2, 0.005)

    def home_of_arrival(self, k):
        return int(self.arrival_homes[k])

    def from_source(self, k, gone):
        """Whether arrival k will not come: its first home is lost, and this
        host re-homes that host's items only from a later epoch on."""
        lost = int(gone[self.home_of_arrival(k)])
        return lost != 0 and int(self.arrival_epochs[k]) < lost - 1
