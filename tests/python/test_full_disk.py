"""A full disk, for real, from Python: a child interpreter runs in a mount
namespace of its own (`unshare -m`) on a 16 MiB tmpfs it fills. Puts with
sync="every" raise NoSpaceError, what the store holds is still served, a
reopen on the disk that is still full works (and so does the CLI's verify),
and once space is back the store takes Puts again. Skipped, saying why,
where the mount is impossible. tests/store_full_disk_test.cc covers the
same in C++, with more cases. And /dev/shm too small for
opt4store.DataLoader's batch slots, on a tmpfs mounted over it the same
way."""

import json

from o4s_testlib import child_env, run_on_tmpfs

CHILD = r"""
import json, os, subprocess, sys
import torch
import opt4store
from opt4store import NO_POSITION
from o4s_testlib import count_served, fill_disk  # fill_disk: as a user's other files would

mnt = sys.argv[1]
path = os.path.join(mnt, "store")

def value(i):
    return torch.full((16 * 1024,), i % 251, dtype=torch.uint8)

def served(store, n):
    found, wrong = count_served(store, range(n), value)
    assert wrong == 0, f"{wrong} wrong values"
    return found

def put_all(store, n, stored):
    refused = []
    for i in range(n):
        if i in stored:
            continue
        try:
            store.put(NO_POSITION, i, value(i))
            stored.add(i)
        except opt4store.NoSpaceError as e:
            refused.append(str(e))
    return refused

n, stored = 600, set()
s = opt4store.Store(path, ram_items=20, disk="256MiB", sync="every")
s.bind(n)
for i in range(100):
    s.put(NO_POSITION, i, value(i))
    stored.add(i)

fill_disk(mnt)
refused = put_all(s, n, stored)
assert refused, "no Put was refused on the full disk"
assert served(s, n) >= len(stored)
s.close()
stored_while_full = len(stored)

fill_disk(mnt)  # a refused write's bytes were freed again
s = opt4store.Store(path, sync="every")  # reopens at once: the store exists
s.bind(n)
after_reopen = served(s, n)
s.close()
fill_disk(mnt)
verify = subprocess.run([os.environ["OPT4STORE_CLI"], "verify", path],
                        capture_output=True, text=True)

os.unlink(os.path.join(mnt, "filler"))
s = opt4store.Store(path, sync="every")
s.bind(n)
refused_after = put_all(s, n, stored)
final = served(s, n)
s.close()
print(json.dumps({"refused": len(refused), "message": refused[0], "stored": stored_while_full,
                  "after_reopen": after_reopen, "verify_rc": verify.returncode,
                  "verify": verify.stdout + verify.stderr,
                  "refused_after": len(refused_after), "final": final}))
"""


def test_full_disk_no_space_error_serving_reopen_and_recovery(tmp_path, opt4store_cli):
    cli = opt4store_cli
    mnt = tmp_path / "fs"
    mnt.mkdir()
    env = child_env()
    env["OPT4STORE_CLI"] = cli
    proc = run_on_tmpfs(mnt, "16m", CHILD, env=env)
    assert proc.returncode == 0, f"child failed\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["refused"] > 0
    assert "space" in r["message"]
    assert r["after_reopen"] == r["stored"]  # every acknowledged Put, from disk
    assert r["verify_rc"] == 0, r["verify"]
    assert r["refused_after"] == 0
    assert r["final"] == 600


CHILD_FLUSH = r"""
import os, sys
import torch
import opt4store
from opt4store import NO_POSITION
from o4s_testlib import count_served, fill_disk  # fill_disk: as a user's other files would

mnt = sys.argv[1]
path = os.path.join(mnt, "store")
n = 6144  # 4 KiB values: 24 MiB, more than the disk holds

def value(i):
    return torch.full((1024,), float(i))


s = opt4store.Store(path, ram_items=20, disk="256MiB", sync="flush")
s.bind(n)
for i in range(n):
    s.put(NO_POSITION, i, value(i))  # refused writes are counted, not raised
fill_disk(mnt)
for i in range(n):
    s.put(NO_POSITION, i, value(i))
wrong = sum(1 for i in range(n)
            if (v := s.get(NO_POSITION, i)) is not None and not torch.equal(v, value(i)))
try:
    s.close()
except opt4store.NoSpaceError:
    pass
print("wrong", wrong)
"""


def test_full_disk_with_sync_flush_does_not_abort(tmp_path):
    """sync="flush" on a disk that fills: RocksDB's own info-LOG writer,
    once a line met the full disk, aborted the process at its next line
    (found by bench/fault_campaign.py); the store's IndexInfoLog drops such
    lines instead."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    proc = run_on_tmpfs(mnt, "16m", CHILD_FLUSH)
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-2000:]}"
    assert proc.stdout.strip().splitlines()[-1] == "wrong 0"


CHILD_SHM = r"""
import sys
import torch
import opt4store

n, side = 96, 128

class Images(torch.utils.data.Dataset):
    def __len__(self):
        return n

    def __getitem__(self, i):
        return torch.full((3, side, side), i % 251, dtype=torch.uint8), i

def to_float(sample):  # a transform, so that the workers write float batches into the slots
    image, i = sample
    return image.float(), i

store = opt4store.Store(sys.argv[2], ram_items=n, disk=0)
sampler = opt4store.PlannedSampler(
    torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(1)),
    epochs=2)
ds = opt4store.CachedDataset(Images(), store, sampler, transform=to_float)
try:  # 8 slots of 64 float images (12 MiB each) in what the store left of /dev/shm
    for batch in opt4store.DataLoader(ds, sampler=sampler, batch_size=64, num_workers=2):
        pass
    print("no error")
except opt4store.NoSpaceError as e:
    print("NoSpaceError:", e)
wrong = 0
for image, i in opt4store.DataLoader(ds, sampler=sampler, batch_size=64, num_workers=0):
    wrong += sum(not torch.equal(image[k], torch.full((3, side, side), float(j % 251)))
                 for k, j in enumerate(i.tolist()))
store.close()
print("wrong", wrong)
"""


def test_dev_shm_too_small_for_the_loaders_slots(tmp_path):
    """opt4store.DataLoader's workers write batches into slots in /dev/shm.
    One that does not hold them raises NoSpaceError naming /dev/shm (before,
    the process died of SIGBUS writing the slots), and the store still
    serves every value."""
    proc = run_on_tmpfs("/dev/shm", "96m", CHILD_SHM, tmp_path / "store")
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-2000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].startswith("NoSpaceError: no space: opt4store.DataLoader's batch slot"), lines
    assert "/dev/shm" in lines[-2] and "--shm-size" in lines[-2]
    assert lines[-1] == "wrong 0"


CHILD_SHM_FILLED = r"""
import sys
import torch
import opt4store
from opt4store import NO_POSITION
from o4s_testlib import count_served, fill_disk

store = opt4store.Store(sys.argv[2], ram="300MiB", disk=0)
store.bind(1200)
fill_disk("/dev/shm")  # another program takes what is left of /dev/shm


def value(i):
    return torch.full((256 * 1024,), i % 251, dtype=torch.uint8)


for i in range(1200):  # 300 MiB of values: past the RAM tier's first step
    store.put(NO_POSITION, i, value(i))
found, wrong = count_served(store, range(1200), value)
print(found, store.stats()["ram_insert_failures"], wrong)
store.close()
"""


def test_dev_shm_filled_after_the_open_costs_ram_hits_never_a_sigbus(tmp_path):
    """The RAM tier reserves /dev/shm as it fills (tiers/ram_tier.h): 16
    MiB at the open, the next 128 MiB step at once in the background, then
    a step at a time. Another program that fills /dev/shm after the open
    leaves the tier with what it reserved (16 or 144 MiB, as the race with
    the planner went): the inserts past it fail (counted, warned about
    once, naming /dev/shm), the process lives (no SIGBUS), and every value
    it serves is right."""
    proc = run_on_tmpfs("/dev/shm", "400m", CHILD_SHM_FILLED, tmp_path / "store")
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-2000:]}"
    found, failures, wrong = map(int, proc.stdout.split()[-3:])
    assert wrong == 0
    assert 60 <= found <= 600, found  # 16 to 144 MiB of 256 KiB values
    assert failures == 1200 - found
    assert "/dev/shm has no room" in proc.stderr, proc.stderr[-2000:]


CHILD_QUEUE_FILLED = r"""
import os
import sys
import torch
import opt4store
from opt4store import NO_POSITION
from o4s_testlib import count_served, fill_disk

store = opt4store.Store(sys.argv[2], ram="64MiB", disk=0)
store.bind(8)
fill_disk("/dev/shm")  # another program takes what is left of /dev/shm


def value(i):
    return torch.full((6 << 20,), i, dtype=torch.uint8)


pid = os.fork()
if pid == 0:  # a worker: a 6 MiB put needs more of the queue than its first step
    code = 1
    try:
        for i in range(4):
            store.put(NO_POSITION, i, value(i))
        code = 0
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
for i in range(4, 8):  # the owner's own puts go to its RAM tier, reserved at the open
    store.put(NO_POSITION, i, value(i))
found, wrong = count_served(store, range(8), value)
print(os.WEXITSTATUS(status), found, store.stats()["puts_dropped"], wrong)
store.close()
"""


def test_dev_shm_filled_after_the_open_drops_a_workers_puts_never_a_sigbus(tmp_path):
    """The workers' queue to the owner (tiers/shared_queue.h) reserves
    /dev/shm a step at a time as puts first need it. When another program
    has filled /dev/shm, a worker's put that needs the next step is dropped
    (counted in puts_dropped, warned about, naming /dev/shm): the worker
    lives (no SIGBUS), and the value is loaded again when next needed."""
    proc = run_on_tmpfs("/dev/shm", "200m", CHILD_QUEUE_FILLED, tmp_path / "store")
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-2000:]}"
    worker_exit, found, dropped, wrong = map(int, proc.stdout.split()[-4:])
    assert (worker_exit, found, dropped, wrong) == (0, 4, 4, 0)
    assert "cannot grow" in proc.stderr and "/dev/shm has no room" in proc.stderr, \
        proc.stderr[-2000:]


CHILD_DOCKER_SHM = r"""
import sys
import torch
import opt4store

class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((1024,), i % 251, dtype=torch.uint8), i

store = opt4store.Store(sys.argv[2], ram="8MiB", disk="16MiB")
sampler = opt4store.PlannedSampler(
    torch.utils.data.RandomSampler(range(64), generator=torch.Generator().manual_seed(1)),
    epochs=2)
ds = opt4store.CachedDataset(Items(), store, sampler)
wrong = 0
for epoch in range(2):
    for values, i in opt4store.DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2):
        wrong += sum(not torch.equal(values[k], torch.full((1024,), j % 251, dtype=torch.uint8))
                     for k, j in enumerate(i.tolist()))
print("loads", store.stats()["source_loads"], "wrong", wrong)
store.close()
"""


def test_a_store_opens_and_loads_in_dockers_default_dev_shm(tmp_path):
    """Docker's default /dev/shm is 64 MiB. The shared queue (64 MiB of
    capacity, reserved 4 MiB at a time as it fills) made every store fail to
    open there (NoSpaceError: the check asked for its whole capacity free)."""
    proc = run_on_tmpfs("/dev/shm", "64m", CHILD_DOCKER_SHM, tmp_path / "store")
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
    assert proc.stdout.strip().splitlines()[-1] == "loads 64 wrong 0", proc.stdout
