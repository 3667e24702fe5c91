"""The processes bench/fault_campaign.py starts, killed or checked: a
training job, a putting loop, a DDP local rank, the full-disk script, the
Python bad-input fuzzer, and the checker that reopens a store and compares
every value it serves with the source. Run as
``python3 -m fault_campaign_children MODE ARGS...``; each prints one JSON
line last."""

import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

NUMEL = 2048  # float32 elements of a training sample: 8 KiB


# ---------------------------------------------------------------- sources


def row(i, width):
    """Row i of the .npy files the CLI imports."""
    return ((np.arange(width, dtype=np.uint32) * (i + 1) + i) % 251).astype(np.uint8)


def write_rows(path, n, width):
    np.save(path, np.stack([row(i, width) for i in range(n)]))


def sample(i):
    import torch
    g = torch.Generator().manual_seed(1000 + int(i))
    return torch.rand(NUMEL, generator=g)


class Source:
    """(index, sample(index)); `delay` seconds per load (a decode)."""

    def __init__(self, n, delay=0.0):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        import torch
        return torch.tensor(int(i)), sample(i)


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def emit(obj):
    print(json.dumps(obj), flush=True)


def expected_error(e):
    """What a killed worker or peer may raise: an opt4store.Error, or
    torch's report that a worker died."""
    import opt4store
    return isinstance(e, opt4store.Error) or (
        isinstance(e, RuntimeError) and "DataLoader worker" in str(e))


# ---------------------------------------------------------------- killed processes


def train(path, n, sync, workers, seed, acked, *rest):
    import torch
    import opt4store
    n, workers, seed = int(n), int(workers), int(seed)
    delay = float(next((r[6:] for r in rest if r.startswith("delay=")), 0))
    disk = next((r[5:] for r in rest if r.startswith("disk=")), "64MiB")
    g = torch.Generator().manual_seed(seed)
    store = opt4store.Store(path, ram="1MiB", disk=disk, sync=sync)
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(range(n), generator=g),
                                       epochs=3)
    ds = opt4store.CachedDataset(Source(n, delay), store, sampler)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=16, num_workers=workers)
    print("started", flush=True)
    wrong, raised = 0, None
    try:
        for _ in range(3):
            for ids, values in loader:
                wrong += sum(not torch.equal(v, sample(i)) for i, v in zip(ids.tolist(), values))
        store.close()
    except Exception as e:  # reported: the campaign judges it
        raised = e
    emit({"wrong": wrong, "raised": raised and f"{type(raised).__name__}: {raised}"[:300],
          "expected": raised is None or expected_error(raised)})


def put(path, n, sync, workers, seed, acked, *rest):
    import opt4store
    n = int(n)
    delay = float(next((r[6:] for r in rest if r.startswith("delay=")), 0))
    store = opt4store.Store(path, ram_items=4, disk="64MiB", sync=sync)
    store.bind(n)
    fd = os.open(acked, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    print("started", flush=True)
    for i in range(n):
        store.put(opt4store.NO_POSITION, i, sample(i))
        os.write(fd, b"%d\n" % i)  # acknowledged
        time.sleep(delay)
    while True:
        time.sleep(1)


def rank(path, n, local_rank, seed):
    import torch
    import opt4store
    n, local_rank, seed = int(n), int(local_rank), int(seed)
    base = torch.utils.data.DistributedSampler(range(n), num_replicas=2, rank=local_rank,
                                               shuffle=True, seed=seed)
    sampler = opt4store.PlannedSampler(base, epochs=3)
    wrong, raised = 0, None
    try:
        store = opt4store.Store(path, ram_items=64, disk="64MiB", shared="local",
                                local_rank=local_rank, local_world_size=2, shared_timeout=20,
                                fetch_timeout_ms=3000)
        ds = opt4store.CachedDataset(Source(n, 0.004), store, sampler)
        loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=8)
        print("started", flush=True)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for ids, values in loader:
                wrong += sum(not torch.equal(v, sample(i)) for i, v in zip(ids.tolist(), values))
        store.close()
    except Exception as e:
        raised = e
    emit({"wrong": wrong, "raised": raised and f"{type(raised).__name__}: {raised}"[:300],
          "expected": raised is None or expected_error(raised)})


# ---------------------------------------------------------------- the checker


def _open(path, n):
    import opt4store
    store = opt4store.Store(path)
    try:
        store.bind(n)  # the open happens here
    except BaseException:
        store.close()
        raise
    return store


def _open_or_repair(path, n, failures):
    """The store at path, bound to n items, repaired first when its open
    says to; (store, repaired, lost)."""
    import opt4store
    try:
        return _open(path, n), False, 0
    except opt4store.CorruptionError as e:
        if "repair" not in str(e):
            failures.append(f"open: {type(e).__name__}: {e}")
            return None, False, 0
    except opt4store.Error as e:
        failures.append(f"open: {type(e).__name__}: {e}")
        return None, False, 0
    except Exception as e:
        failures.append(f"open raised a non-opt4store error: {type(e).__name__}: {e}")
        return None, False, 0
    cli = os.environ["OPT4STORE_CLI"]
    r = subprocess.run([cli, "repair", path], capture_output=True, text=True)
    if r.returncode != 0 and "--dataset-size" in r.stderr:
        r = subprocess.run([cli, "repair", path, "--dataset-size", str(n), "--disk", "64MiB"],
                           capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"repair exited {r.returncode}: {r.stderr[-300:]}")
        return None, True, 0
    m = re.search(r"records lost for good\s*\|?\s*(\d+)", r.stdout)
    lost = int(m.group(1)) if m else 0
    try:
        return _open(path, n), True, lost
    except Exception as e:
        failures.append(f"open after repair: {type(e).__name__}: {e}")
        return None, True, lost


def same_sample(i, v):
    """v is what the store holds for i: a training job's (index, sample) or
    a Put loop's sample."""
    import torch
    if isinstance(v, (tuple, list)):
        return len(v) == 2 and int(v[0]) == i and torch.equal(v[1], sample(i))
    return isinstance(v, torch.Tensor) and torch.equal(v, sample(i))


def check(path, n, expect=None):
    import opt4store
    n = int(n)
    failures = []
    if not os.path.exists(path):
        emit({"wrong": 0, "stored": 0, "acked_lost": 0, "failures": []})
        return
    store, repaired, lost = _open_or_repair(path, n, failures)
    wrong = stored = acked_lost = 0
    acked = set()
    width = None
    rows = None
    if expect and expect.startswith("rows:"):
        rows = np.load(expect[5:], mmap_mode="r")
        width = rows.shape[1]
    elif expect and os.path.exists(expect):
        with open(expect) as f:
            acked = {int(x) for x in f.read().split()}
    if store is not None:
        try:
            for i in range(n):
                v = store.get(opt4store.NO_POSITION, i)
                if v is None:
                    acked_lost += i in acked
                    continue
                stored += 1
                if width is not None:
                    ok = np.array_equal(np.asarray(v).reshape(-1), row(i, width))
                else:
                    ok = same_sample(i, v)
                wrong += not ok
            store.close()
        except Exception as e:
            failures.append(f"reading: {type(e).__name__}: {e}")
    emit({"wrong": int(wrong), "stored": stored, "acked_lost": int(acked_lost),
          "failures": failures, "repaired": repaired, "lost": lost})


# ---------------------------------------------------------------- a full disk


def full_disk(mnt, seed):
    import random
    import torch
    import opt4store
    from o4s_testlib import fill_disk  # tests/python: on the campaign's PYTHONPATH
    rng = random.Random(int(seed))
    path = os.path.join(mnt, "store")
    numel = rng.choice([1024, 4096, 8192])
    sync = rng.choice(["every", "flush"])
    n = (24 << 20) // (numel * 4)  # more than the 16 MiB disk holds

    def value(i):
        return torch.full((numel,), float(i))

    failures, wrong = [], 0

    def put_all(store, stored):
        for i in range(n):
            if i in stored:
                continue
            try:
                store.put(opt4store.NO_POSITION, i, value(i))
                stored.add(i)
            except opt4store.NoSpaceError:
                pass
            except Exception as e:
                failures.append(f"put: {type(e).__name__}: {e}")
                return

    def served(store):
        nonlocal wrong
        found = 0
        for i in range(n):
            v = store.get(opt4store.NO_POSITION, i)
            if v is not None:
                wrong += not torch.equal(v, value(i))
                found += 1
        return found

    def close(store):
        try:
            store.close()
        except opt4store.NoSpaceError:
            pass

    stored = set()
    s = opt4store.Store(path, ram_items=20, disk="256MiB", sync=sync)
    s.bind(n)
    put_all(s, stored)  # fills part of the disk
    fill_disk(mnt)
    put_all(s, stored)
    served(s)
    close(s)
    fill_disk(mnt)
    try:
        s = opt4store.Store(path, sync=sync)
        s.bind(n)
        on_full = served(s)
        if sync == "every" and on_full < len(stored):
            failures.append(f"reopened on the full disk: {on_full} of {len(stored)} served")
        close(s)
    except Exception as e:
        failures.append(f"reopen on the full disk: {type(e).__name__}: {e}")
    verify = subprocess.run([os.environ["OPT4STORE_CLI"], "verify", path],
                            capture_output=True, text=True)
    if verify.returncode != 0:
        failures.append(f"verify on the full disk exited {verify.returncode}: "
                        f"{(verify.stdout + verify.stderr)[-300:]}")
    os.unlink(os.path.join(mnt, "filler"))
    final = 0
    try:
        s = opt4store.Store(path, sync=sync, disk="12MiB")  # within the freed disk
        s.bind(n)
        put_all(s, stored)
        final = served(s)
        close(s)
    except Exception as e:
        failures.append(f"open with space back: {type(e).__name__}: {e}")
    emit({"wrong": int(wrong), "stored": final, "failures": failures,
          "detail": f"{numel * 4} B values, sync={sync}, {final} served at the end"})


# ---------------------------------------------------------------- bad Python inputs


BAD_VALUES = ["x", "", 1.5, -1, 2 ** 64, -(2 ** 70), math.nan, math.inf, True, None, [1],
              {"a": 1}, b"x", object(), (1, 2), np.float32(2.5), np.int64(-3)]


def _entry_points(ctx):
    """(name, call with one bad value) for each argument of the public API."""
    import torch
    import opt4store
    from opt4store import distributed

    def sampler(**kw):
        args = {"sampler": torch.utils.data.SequentialSampler(range(10)), "epochs": 2}
        args.update(kw)
        return opt4store.PlannedSampler(**args)

    def store_kw(k):
        return lambda b: opt4store.Store(os.path.join(ctx["dir"], "s"), **{k: b})

    def ds_kw(k):
        return lambda b: opt4store.CachedDataset(
            **dict({"dataset": Source(10), "store": opt4store.Store(None, ram_items=10)}, **{k: b}))

    def loader_kw(k):
        return lambda b: opt4store.DataLoader(ctx["ds"], **{k: b})

    s = ctx["store"]
    points = [(f"Store({k}=)", store_kw(k)) for k in (
        "ram", "ram_items", "disk", "prefetch_depth", "staging", "policy", "compression",
        "sync", "fingerprint", "reset", "fetch_timeout_ms", "shared", "local_rank",
        "local_world_size", "shared_name", "shared_timeout")]
    points += [("Store(path)", lambda b: opt4store.Store(b))]
    points += [(f"CachedDataset({k}=)", ds_kw(k)) for k in (
        "dataset", "store", "sampler", "transform", "spot_check")]
    points += [(f"DataLoader({k}=)", loader_kw(k)) for k in (
        "batch_size", "num_workers", "timeout", "drop_last", "pin_memory", "collate_fn",
        "worker_init_fn", "generator", "device", "persistent_workers", "shuffle")]
    points += [
        ("PlannedSampler(epochs=)", lambda b: sampler(epochs=b)),
        ("PlannedSampler(sampler=)", lambda b: sampler(sampler=b)),
        ("PlannedSampler.set_epoch", lambda b: sampler().set_epoch(b)),
        ("PlannedSampler.epoch_ids", lambda b: sampler().epoch_ids(b)),
        ("PlannedSampler.state_dict", lambda b: sampler().state_dict(b)),
        ("PlannedSampler.note_yielded", lambda b: sampler().note_yielded(b)),
        ("PlannedSampler.load_state_dict", lambda b: sampler().load_state_dict(b)),
        ("PlannedSampler.load_state_dict(epoch=)",
         lambda b: (lambda p: p.load_state_dict(dict(p.state_dict(0), epoch=b)))(sampler())),
        ("PlannedSampler.load_state_dict(index=)",
         lambda b: (lambda p: p.load_state_dict(dict(p.state_dict(0), index=b)))(sampler())),
        ("Store.get(position)", lambda b: s.get(b, 0)),
        ("Store.get(index)", lambda b: s.get(0, b)),
        ("Store.peek", lambda b: s.peek(b)),
        ("Store.put(index)", lambda b: s.put(opt4store.NO_POSITION, b, sample(0))),
        ("Store.put(value)", lambda b: s.put(opt4store.NO_POSITION, 9, b)),
        ("Store.get_batch", lambda b: s.get_batch([0], [b])),
        ("Store.locate", lambda b: s.locate([b])),
        ("Store.mark_consumed", lambda b: s.mark_consumed([0], [b])),
        ("Store.begin_epoch", lambda b: s.begin_epoch(b)),
        ("Store.bind", lambda b: opt4store.Store(None, ram_items=4).bind(b)),
        ("Store.set_plan(epoch_length)",
         lambda b: (lambda t: (t.bind(10), t.set_plan([0, 1], b, 0)))(
             opt4store.Store(None, ram_items=4))),
        ("Store.set_plan(start)",
         lambda b: (lambda t: (t.bind(10), t.set_plan([0, 1], 2, b)))(
             opt4store.Store(None, ram_items=4))),
        ("Store.warn_once", lambda b: s.warn_once(b, "message")),
        ("CachedDataset[]", lambda b: ctx["ds"][b]),
        ("CachedDataset.__getitems__", lambda b: ctx["ds"].__getitems__([b])),
        ("DataLoader.set_epoch", lambda b: opt4store.DataLoader(ctx["ds"]).set_epoch(b)),
        ("DataLoader.load_state_dict", lambda b: opt4store.DataLoader(ctx["ds"]).load_state_dict(b)),
        ("parse_size", lambda b: opt4store.parse_size(b)),
        ("to_device(depth=)", lambda b: opt4store.to_device([], "cpu", depth=b)),
        ("to_device(device=)", lambda b: opt4store.to_device([], b)),
        ("to_device(pace=)", lambda b: opt4store.to_device([], "cpu", pace=b)),
        ("resolve_layout", lambda b: distributed.resolve_layout(b, 2)),
    ]
    return points


def bad_python(work, seed, tries):
    """`tries` calls, each of a random entry point with a random bad value.
    An exception must be an opt4store.Error (a plain TypeError only for a
    missing or unknown argument); the open store must still serve right
    values. Prints one result per try."""
    import random
    import torch
    import opt4store
    rng = random.Random(int(seed))
    store = opt4store.Store(os.path.join(work, "ctx"), ram_items=10, disk="16MiB")
    ds = opt4store.CachedDataset(Source(10), store, spot_check=0)
    ctx = {"dir": work, "store": store, "ds": ds}
    points = _entry_points(ctx)
    results = []
    for _ in range(int(tries)):
        name, call = rng.choice(points)
        value = rng.choice(BAD_VALUES)
        failures = []
        try:
            call(value)
            outcome = "accepted"
        except opt4store.Error as e:
            outcome = type(e).__name__
        except Exception as e:
            outcome = type(e).__name__
            failures.append(f"{name} with {value!r}: {type(e).__name__}: {str(e)[:200]}")
        wrong = 0
        for i in (0, 9):
            try:
                index, got = ds[i]
                wrong += not torch.equal(got, sample(i))
            except Exception as e:
                failures.append(f"after {name} with {value!r}: ds[{i}]: {type(e).__name__}: {e}")
        results.append({"wrong": wrong, "failures": failures,
                        "detail": f"{name} {value!r}: {outcome}"[:120]})
    store.close()
    emit({"results": results})


# ---------------------------------------------------------------- bad CLI inputs


def bad_cli_args(rng, path, rows, work):
    """A command line that must be refused with a message."""
    fresh = os.path.join(work, "fresh")
    a_file = os.path.join(work, "a_file")
    with open(a_file, "wb") as f:
        f.write(os.urandom(rng.randrange(0, 4096)))
    bad_number = rng.choice(["-1", "18446744073709551616", "1.5", "lots", "", "1e3", "0x10",
                             "5ZiB", "99999999999999999999999", "nan", " 7"])
    huge_npy = os.path.join(work, "huge.npy")
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (
        rng.choice([2 ** 40, 2 ** 62, 2 ** 63 - 1]), rng.choice([2 ** 30, 2 ** 40]))
    header += " " * (118 - len(header)) + "\n"
    with open(huge_npy, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
    choices = [
        ["create", fresh, "--dataset-size", "10", "--ram", bad_number],
        ["create", fresh, "--dataset-size", bad_number],
        ["create", fresh, "--dataset-size", "10", "--disk", bad_number],
        ["create", fresh, "--dataset-size", "10", "--prefetch-depth", bad_number],
        ["create", a_file, "--dataset-size", "10"],
        ["create", path, "--dataset-size", "51"],
        ["create", fresh, "--dataset-size", "10", "--plan", a_file],
        ["create", fresh, "--dataset-size", "10", "--plan", os.path.join(work, "missing")],
        ["get", path, rng.choice(["-1", "50", "18446744073709551616", "abc", "1.5"])],
        ["import", path, "--from", os.path.join(work, "missing.npy")],
        ["import", path, "--from", a_file],
        ["import", path, "--from", huge_npy],
        ["import", path, "--from", rows, "--first-id",
         rng.choice(["18446744073709551615", "49", "-3"])],
        ["verify", os.path.join(work, "missing")],
        ["verify", a_file],
        ["stats", a_file],
        ["inspect", os.path.join(work, "missing")],
        ["repair", path, "--dataset-size", bad_number, "--disk", "1MiB"],
        ["compact", a_file],
        ["clear"],
        ["inspect", path, "--no-such-flag"],
        ["no-such-command", path],
    ]
    args = rng.choice(choices)
    if args[-1] == "":  # an empty value the shell would pass as ''
        args = args[:-1] + [""]
    return args


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    {"train": train, "put": put, "rank": rank, "check": check, "full_disk": full_disk,
     "bad_python": bad_python}[mode](*args)


if __name__ == "__main__":
    main()
