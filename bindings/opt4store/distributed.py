"""One store for the local ranks of a host (DDP).

``Store(path, ..., shared="local")`` on every rank. When a CachedDataset
binds it, local rank 0 opens the store (it is the owner: it alone opens the
disk tier and runs the planner) and publishes its handle; every other local
rank attaches to it as a reader, as a spawned DataLoader worker does. The
handle travels by ``torch.distributed`` (an all_gather among all ranks,
when a process group is initialized: it cannot go stale; a gloo group's,
_object_group) or else by a small
file in ``/dev/shm`` (or the temp dir), written atomically by the owner,
removed when it closes, and ignored once its writer is dead.

Local ranks: ``local_rank=`` and ``local_world_size=`` when given, else the
environment variables ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` that torchrun
sets, else (with a process group of more than one rank) the ranks that share
this host's name, else a single process. A host's ranks must be contiguous:
global rank = node * local_world_size + local_rank.

The plan: a PlannedSampler over a DistributedSampler records the orders of
all local ranks and interleaves them, local rank r's i-th read at host
position i * local_world_size + r (the order the host's store sees when the
ranks advance in lockstep, as DDP makes them). See PlannedSampler.
"""

import atexit
import hashlib
import json
import os
import re
import socket
import tempfile
import time
import warnings

from . import _core
from ._checks import check_int
from ._errors import BusyError, Error, InvalidArgumentError

# A rank waiting for the owner's handle file looks again after 1 ms, then
# after twice as long each time, up to 50 ms: the file usually comes within
# tens of ms of the rank's start, and a fixed 50 ms cost it 25 on average.
_POLL_FIRST_SECONDS = 0.001
_POLL_SECONDS = 0.05
_CLOSE_IDLE_SECONDS = 30.0  # wait_for_rank_readers


def _env_int(name):
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"the environment variable {name}={value!r} is not an integer") \
            from None


def _process_group():
    """torch.distributed when a process group is initialized, else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


# (default group, gloo group) of the last exchange over a default group
# without gloo (_object_group).
_gloo_group = [None, None]


def _object_group(dist):
    """The group the handle exchange runs on: the default group when its
    backend has gloo, else a gloo group of all ranks, made once per default
    group (by every rank, at the same call: the exchange is collective).
    all_gather_object on NCCL moves the objects to
    torch.cuda.current_device(), which is cuda:0 on every rank of a script
    that has not called set_device yet; the handles are CPU data."""
    if "gloo" in str(dist.get_backend()):
        return None
    world = dist.group.WORLD
    if _gloo_group[0] is not world:
        _gloo_group[:] = [world, dist.new_group(backend="gloo")]
    return _gloo_group[1]


def _all_gather(dist, value):
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value, group=_object_group(dist))
    return values


def _hosts_layout(dist):
    """(local_rank, local_world_size) from the host names of all ranks."""
    hosts = _all_gather(dist, socket.gethostname())
    rank = dist.get_rank()
    local_world = hosts.count(hosts[rank])
    # The same check on every rank, from the same list: all raise or none.
    for start in range(0, len(hosts), local_world):
        block = hosts[start:start + local_world]
        if len(block) != local_world or block.count(block[0]) != local_world or \
                hosts.count(block[0]) != local_world:
            raise InvalidArgumentError(
                "opt4store: the ranks of a host must be contiguous and as many on every host "
                f"(global rank = node * local_world_size + local_rank); ranks by host: {hosts}. "
                "Set LOCAL_RANK and LOCAL_WORLD_SIZE, or pass local_rank= and local_world_size=")
    return rank % local_world, local_world


def resolve_layout(local_rank=None, local_world_size=None):
    """(local_rank, local_world_size) of this process, as described in the
    module's docstring."""
    if (local_rank is None) != (local_world_size is None):
        raise InvalidArgumentError("give both local_rank= and local_world_size=, or neither")
    if local_rank is None:
        local_rank, local_world_size = _env_int("LOCAL_RANK"), _env_int("LOCAL_WORLD_SIZE")
        if local_rank is None or local_world_size is None:
            dist = _process_group()
            if dist is not None and dist.get_world_size() > 1:
                return _hosts_layout(dist)
            if (local_rank is None) != (local_world_size is None):
                given, missing = ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if local_world_size is None \
                    else ("LOCAL_WORLD_SIZE", "LOCAL_RANK")
                raise InvalidArgumentError(
                    f"{given} is set and {missing} is not, and there is no process group to "
                    "tell the host's ranks: set both (torchrun does), or pass local_rank= and "
                    "local_world_size=")
            world = _env_int("WORLD_SIZE")
            if world is not None and world > 1:
                # A job of several ranks, bound before init_process_group: as
                # one process each, the second rank met the first's LOCK.
                raise InvalidArgumentError(
                    f"WORLD_SIZE={world}, but neither LOCAL_RANK and LOCAL_WORLD_SIZE nor a "
                    "process group tell this host's ranks: set both variables (torchrun "
                    "does), bind the store after torch.distributed.init_process_group, or "
                    "pass local_rank= and local_world_size=")
            local_rank, local_world_size = 0, 1
    local_rank = check_int("local_rank", local_rank, 0, None)
    local_world_size = check_int("local_world_size", local_world_size, 1, None)
    if local_world_size < 1 or not 0 <= local_rank < local_world_size:
        raise InvalidArgumentError(
            f"local_rank {local_rank} does not fit local_world_size {local_world_size}")
    return local_rank, local_world_size


# Store.warn_once's kind for unshared_ddp_warning (kinds 32-63 are the
# package's; _values.WARN_PICKLE is 32).
WARN_UNSHARED = 33


def unshared_ddp_warning(sampler):
    """The warning for a store of one DDP rank's own (no shared=) bound
    with a DistributedSampler while torchrun's LOCAL_WORLD_SIZE says other
    ranks run on this host; else None. Only the environment is asked, not
    the process group: binding makes no collective call here."""
    replicas = getattr(getattr(sampler, "sampler", None), "num_replicas", None)
    try:
        local = _env_int("LOCAL_WORLD_SIZE")
    except InvalidArgumentError:
        return None  # the store that shares would say so; this one does not use it
    if not isinstance(replicas, int) or replicas < 2 or local is None or local < 2:
        return None
    return ("opt4store: this store serves one DDP rank of the %d on this host "
            "(LOCAL_WORLD_SIZE=%d). DistributedSampler gives each rank other samples every "
            "epoch, so a store per rank decodes most samples once per rank. "
            'Store(..., shared="local") on every rank makes the host\'s ranks share one '
            "store, which decodes each sample once (bench/ddp_bench.py: source loads 1.00 N "
            "against 1.85 N with a store per rank)." % (local, local))


def _stat_fields(pid):
    """/proc/<pid>/stat's fields from field 3 (the state) on, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid):
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat
    field 22, as the engine's shm::ProcessIdentity has it), or None."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19])
    except (TypeError, IndexError, ValueError):
        return None


def pid_alive(pid, started=None):
    """Whether process `pid` exists (another user's counts as alive) and,
    when `started` (start_ticks) is given, is the process that started then,
    not a later one that got its pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid)
    if fields and fields[0] == b"Z":
        return False  # killed, not yet reaped: dead, as the engine's ProcessAlive has it
    return started is None or start_ticks(pid) in (None, started)


def pid_namespace():
    """This process's pid namespace: the inode of /proc/self/ns/pid, 0 when
    it cannot be read (as the engine's shm::PidNamespace)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def user_prefix():
    """The start of the names of this user's files in shared_folder(), in
    this pid namespace: a container that shares /dev/shm with others (docker
    --ipc=host) neither reads another's files nor judges their writers,
    whose pids mean nothing here."""
    return f"opt4store-{os.getuid()}-pidns{pid_namespace()}-"


def shared_folder():
    """Where the handle files (and a cluster host's state files) live:
    /dev/shm when it is writable, else the temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else tempfile.gettempdir()


def remove_files_of_gone(folder, prefix, owner_of):
    """Removes the files in `folder` whose names start with `prefix` and
    whose writer is gone (killed before its close): owner_of(name) gives the
    writer as (pid, start_ticks or None), or None to leave the file alone."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        owner = owner_of(name) if name.startswith(prefix) else None
        if owner is None or not owner[0] > 0 or pid_alive(*owner):
            continue
        try:
            os.remove(os.path.join(folder, name))
        except OSError:
            pass


def read_handle(path):
    """The handle record at `path` (a dict with an int "pid"), or None."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return None
    return record


def remove_orphan_handles(folder):
    """Removes the handle files (and half-written ones) of this user's owners
    whose process is gone: an owner killed before its close leaves its file,
    and the next owner under the same name would only overwrite that one."""
    def owner_of(name):
        if name.endswith(".tmp"):  # "<target>.<pid>.tmp"
            pid = name.rsplit(".", 2)[-2]
            return (int(pid), None) if pid.isdigit() else None
        record = read_handle(os.path.join(folder, name)) if name.endswith(".handle") else None
        return None if record is None else (record["pid"], record.get("started"))
    remove_files_of_gone(folder, user_prefix(), owner_of)


def check_same_call(records, host):
    """Every local rank of `host` (records from local rank 0 on) made its
    Store with local rank 0's arguments; else InvalidArgumentError, alike
    on each (a reader attaches to the owner's store: its own path and
    settings would be ignored). An argument one of them left out (None:
    the default, which another may give by value) is no difference."""
    owner = records[0]["call"]
    for record in records[1:]:
        theirs = record["call"]
        if record["host"] != host or owner is None or theirs is None:
            continue
        differ = sorted(k for k in set(owner) | set(theirs)
                        if owner.get(k) is not None and theirs.get(k) is not None and
                        owner.get(k) != theirs.get(k))
        if not differ:
            continue
        given = ", ".join(f"{k}={theirs.get(k)!r} (local rank 0: {owner.get(k)!r})"
                          for k in differ)
        raise InvalidArgumentError(
            f"opt4store: local rank {record['local_rank']} of host {host} made its shared Store "
            f"with other arguments than local rank 0: {given}. Every local rank opens local "
            "rank 0's store: make the same Store(...) call on every rank")


class LocalSharing:
    """How a Store with ``shared="local"`` finds its owner. Internal: the
    Store creates it and calls connect() when a dataset binds the store."""

    def __init__(self, path, local_rank=None, local_world_size=None, name=None, timeout=300.0,
                 options=None):
        self.path = path
        self.name = name
        # The Store's arguments, its path's real path among them: the local
        # ranks' must be the owner's (a reader's are unused; check_same_call).
        self.call = None if options is None else \
            dict(options, path=os.path.realpath(path) if path else "")
        self.timeout = float(timeout)
        self._given = (local_rank, local_world_size)
        self.local_rank = None
        self.local_world_size = None
        self._handle_file = None  # the file this process (the owner) wrote

    # ---- layout

    def layout(self):
        if self.local_rank is None:
            self.local_rank, self.local_world_size = resolve_layout(*self._given)
        return self.local_rank, self.local_world_size

    # ---- binding

    def connect(self, open_owner, dataset_size, check_sampler=None):
        """Local rank 0 opens the store by calling open_owner() (which returns
        the opened core, planned) and publishes its handle; every other local
        rank checks its sampler with check_sampler(local_rank,
        local_world_size), attaches to that handle and checks the store's
        dataset_size (None: the caller checks). Returns (core, owner).
        Errors on either side reach every local rank (no rank waits for an
        owner that failed); a core this call opened is closed on failure."""
        local_rank, local_world = self.layout()
        if local_world == 1:
            return open_owner(), True
        dist = _process_group()
        if dist is None and not self.path and not self.name:
            raise InvalidArgumentError(
                "shared='local' without a torch.distributed process group needs a path or "
                "shared_name= for the local ranks to find the owner's handle")
        core, handle, error = None, None, None
        if local_rank == 0:
            try:
                core = open_owner()
                handle = core.handle()
            except Exception as e:  # published, then raised below
                error = e
        elif check_sampler is not None:
            try:
                check_sampler(local_rank, local_world)
            except Exception as e:
                error = e
        if dist is not None:
            try:
                owner_handle = self._exchange_by_group(dist, handle, error)
            except Exception:
                if core is not None:
                    core.close()
                raise
            if local_rank != 0 and error is None:
                core = _core.Store.attach(owner_handle, rank_reader=True)
        elif local_rank == 0:
            try:
                self._publish_file(handle, error)
            except Exception:
                if core is not None:
                    core.close()
                raise
        elif error is None:
            core = self._wait_for_file()
        if error is not None:
            raise error
        if local_rank == 0:
            return core, True
        if dataset_size is not None and core.dataset_size() != dataset_size:
            size = core.dataset_size()
            core.close()
            raise InvalidArgumentError(
                f"local rank 0's store holds a dataset of {size} items; this rank's dataset "
                f"has {dataset_size}")
        return core, False

    # ---- by torch.distributed

    def _exchange_by_group(self, dist, handle, error):
        host = socket.gethostname()
        mine = {"host": host, "local_rank": self.local_rank, "handle": handle,
                "error": None if error is None else f"{type(error).__name__}: {error}",
                "call": self.call}
        records = _all_gather(dist, mine)
        first = dist.get_rank() - self.local_rank
        owner = records[first] if first >= 0 else None
        if owner is not None and owner["local_rank"] == 0 and owner["host"] == host:
            check_same_call(records[first:first + self.local_world_size], host)
        if self.local_rank == 0 or error is not None:
            return handle
        if owner is None or owner["local_rank"] != 0 or owner["host"] != host:
            raise InvalidArgumentError(
                f"opt4store: global rank {dist.get_rank()} (local rank {self.local_rank}) does "
                "not find local rank 0 of its host at global rank "
                f"{dist.get_rank() - self.local_rank}; the ranks of a host must be contiguous "
                "(global rank = node * local_world_size + local_rank)")
        if owner["error"] is not None:
            raise Error(f"opt4store: local rank 0 could not open the shared store: "
                        f"{owner['error']}")
        return owner["handle"]

    # ---- by a file

    def handle_file(self):
        """Where the owner's handle is published when there is no process group."""
        key = self.name if self.name else hashlib.sha1(
            os.path.realpath(self.path).encode()).hexdigest()[:16]
        key = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:100]
        return os.path.join(shared_folder(), f"{user_prefix()}{key}.handle")

    def _read_file(self):
        return read_handle(self.handle_file())

    def _publish_file(self, handle, error):
        target = self.handle_file()
        remove_orphan_handles(os.path.dirname(target))
        old = self._read_file()
        if old is not None and old["pid"] != os.getpid() and \
                pid_alive(old["pid"], old.get("started")):
            # Another live owner publishes under this name: leave its record.
            raise BusyError(
                f"opt4store: process {old['pid']} is alive and publishes another shared store "
                f"as {target}; give this store another shared_name= (or path)") from error
        record = {"pid": os.getpid(), "started": start_ticks(os.getpid()),
                  "path": os.path.realpath(self.path) if self.path else self.path,
                  "handle": handle,
                  "error": None if error is None else f"{type(error).__name__}: {error}"}
        temporary = f"{target}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            json.dump(record, f)
        os.replace(temporary, target)
        # Removed at close, or at exit when the store is never closed (an
        # error record too, once the readers had their chance to see it).
        if self._handle_file is None:
            atexit.register(self.unpublish)
        self._handle_file = target

    def _wait_for_file(self):
        """The owner's store, attached, once a live owner has published it."""
        deadline = time.monotonic() + self.timeout
        last_failure = None
        poll = _POLL_FIRST_SECONDS
        while True:
            record = self._read_file()
            # A record whose writer is dead is stale (a crashed earlier run).
            if record is not None and pid_alive(record["pid"], record.get("started")):
                theirs = record.get("path")
                if theirs is not None and os.path.realpath(theirs or ".") != \
                        os.path.realpath(self.path or "."):
                    raise BusyError(
                        f"opt4store: {self.handle_file()} publishes the shared store at "
                        f"{theirs!r} (process {record['pid']}), not this rank's {self.path!r}: "
                        "another run uses the same shared_name=; give each run its own")
                if record.get("error"):
                    raise Error(f"opt4store: local rank 0 could not open the shared store: "
                                f"{record['error']}")
                try:
                    return _core.Store.attach(record["handle"], rank_reader=True)
                except Error as e:  # the owner closed it meanwhile; a new one may come
                    last_failure = e
            if time.monotonic() > deadline:
                raise Error(
                    f"opt4store: local rank {self.local_rank} waited {self.timeout:.0f} s for "
                    f"local rank 0 to publish the shared store's handle in {self.handle_file()}"
                    + (f" (last attach failed: {last_failure})" if last_failure else "")
                    + "; is local rank 0 running and binding the same store?")
            time.sleep(poll)
            poll = min(2 * poll, _POLL_SECONDS)

    # ---- closing

    def wait_for_rank_readers(self, core):
        """The owner, at close: waits for the other local ranks to attach
        and close, or die (Store::WaitForRankReaders), while any of them
        attaches, reads or closes within _CLOSE_IDLE_SECONDS (or `timeout`,
        if shorter); then warns, and the store closes all the same (what
        they load afterwards is not cached). In lockstep (DDP) they are at
        most a batch behind, so a short idle limit loses nothing a rank
        still reads, and a rank that waits for the owner before it closes
        (a barrier between) holds it no longer than that."""
        if core is None or core.closed or not core.is_owner() or self.local_world_size is None:
            return
        idle = min(self.timeout, _CLOSE_IDLE_SECONDS)
        stuck = core.wait_for_rank_readers(self.local_world_size - 1, int(idle * 1000))
        if stuck is not None:
            warnings.warn(f"opt4store: closing the shared store {self.path!r} although {stuck}; "
                          "what they load from now on is not cached", RuntimeWarning,
                          stacklevel=4)

    def unpublish(self):
        """Removes the handle file this process wrote (the owner, at close)."""
        target, self._handle_file = self._handle_file, None
        if target is None:
            return
        record = self._read_file()
        if record is not None and record["pid"] == os.getpid():
            try:
                os.remove(target)
            except FileNotFoundError:
                pass
