#!/usr/bin/env python3
"""The fault campaign of issue 15, kept and re-runnable: kills of training
processes, of `opt4store import` and `opt4store compact`, damage to index
and segment files, DataLoader worker kills, DDP rank kills, a full disk, and
bad inputs from Python and the CLI, each class tried N times with its own
random seed. After every try the store is opened again (repaired first when
the open asks for it) and every value it serves is checked against the
source.

Counted per class (bench/results/faults.json, and the table that
bench/report_faults.py puts in bench/REPORT.md):
  wrong        values served that differ from the source (must be 0)
  acked_lost   Puts acknowledged with sync="every" and not found after a
               kill (must be 0)
  failures     an open (or a repair) that fails, a verify that lies (exit
               0 while a stored record is no longer served), an exception
               that is not an opt4store.Error (a TypeError for an unknown
               keyword is fine), a process that hangs, a CLI that dies by
               a signal or leaves no message. Each is listed with its seed.

Not part of the test command: a full run takes several minutes.

Usage: OPT4STORE_BUILD_DIR=build PYTHONPATH=build/python \\
       /usr/bin/python3 bench/fault_campaign.py [--scale F] [--seed S]
       [--only CLASS,...] [--merge] [--out FILE]
(--merge keeps the other classes of an existing --out file: a class is run
again alone. Needs root and unshare(1) for the full-disk class, else it is
skipped, saying so.)
"""

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import fault_campaign_children as kids

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Tries per class at --scale 1: 331 in all, as in the issue.
TRIES = {
    "kill_training": 35,
    "kill_import": 20,
    "kill_compact": 15,
    "corrupt_index": 27,
    "corrupt_segment": 27,
    "kill_worker": 20,
    "kill_ddp_rank": 15,
    "full_disk": 10,
    "bad_input_python": 120,
    "bad_input_cli": 42,
}


class Campaign:
    def __init__(self, build, seed):
        self.build = os.path.abspath(build)
        self.cli = os.path.join(self.build, "tools", "opt4store")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(self.build, "python"), HERE, os.path.join(ROOT, "tests", "python")])
        self.env["OPT4STORE_BUILD_DIR"] = self.build
        self.env["OPT4STORE_CLI"] = self.cli
        self.seed = seed

    # ---- processes

    def python(self, *args, timeout=120, **kw):
        return subprocess.run([sys.executable, "-m", "fault_campaign_children", *map(str, args)],
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              **kw)

    def spawn(self, *args):
        return subprocess.Popen([sys.executable, "-m", "fault_campaign_children",
                                 *map(str, args)], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run_cli(self, *args, timeout=120):
        return subprocess.run([self.cli, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout)

    def check(self, path, n, acked_file=None, timeout=300):
        """Opens the store at path in a fresh interpreter (repairing it when
        the open says so) and checks every value; returns the child's JSON."""
        args = ["check", path, n] + ([acked_file] if acked_file else [])
        proc = self.python(*args, timeout=timeout)
        return last_json(proc)

    def verify(self, path):
        proc = self.run_cli("verify", path)
        return proc.returncode, proc.stdout + proc.stderr


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return None


def last_json(proc):
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"rc {proc.returncode}: {(proc.stderr or proc.stdout)[-600:]}"}


def wait_started(proc, timeout=120):
    """Waits for the child's "started" line (its store is open), so that a
    kill lands in its work, not in its imports."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line or line.strip() == "started":
            return
    raise RuntimeError("the child did not start")


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def outcome(result, failures, what=""):
    """Adds a check child's result to a try's failures; returns its counts."""
    if "error" in result:
        failures.append(f"{what}{result['error']}")
        return 0, 0, 0
    for f in result.get("failures", []):
        failures.append(what + f)
    return result["wrong"], result.get("acked_lost", 0), result["stored"]


# ---------------------------------------------------------------- the classes


def try_kill_training(c, rng, work):
    """A training process (PlannedSampler, CachedDataset, opt4store.DataLoader,
    0 or 2 workers, random sync mode) killed with SIGKILL at a random
    moment; or a process putting with sync="every", which writes each id
    to a file as its Put returns: every one must be found."""
    path = os.path.join(work, "store")
    n = 600
    mode = rng.choice(["train", "train", "put"])
    sync = "every" if mode == "put" else rng.choice(["flush", "none", "every"])
    acked = os.path.join(work, "acked")
    # 2 ms a load: the first epoch takes about 1.2 s, a sync="every" Put loop 1 s.
    proc = c.spawn(mode, path, n, sync, rng.choice([0, 2]), rng.randrange(1 << 30), acked,
                   "delay=0.002")
    wait_started(proc)
    time.sleep(rng.uniform(0.0, 2.0))
    kill_group(proc)
    failures = []
    wrong, lost, stored = outcome(c.check(path, n, acked if mode == "put" else None), failures)
    rc, text = c.verify(path) if os.path.exists(path) else (0, "")
    if rc != 0:
        failures.append(f"verify after a kill exited {rc}: {text[-300:]}")
    return {"wrong": wrong, "acked_lost": lost, "failures": failures,
            "detail": f"{mode} sync={sync} stored={stored}"}


def _npy(work, n, rng):
    path = os.path.join(work, "rows.npy")
    kids.write_rows(path, n, width=rng.choice([1024, 4096, 16384]))
    return path


def _kill_then_verify(c, rng, proc, latest, path, what):
    """Kills proc's group at a random moment within `latest` seconds, then
    runs `opt4store verify` on path: a list with its failure, if it failed."""
    time.sleep(rng.uniform(0.0, latest))
    kill_group(proc)
    rc, text = c.verify(path)
    return [f"verify after {what} exited {rc}: {text[-300:]}"] if rc != 0 else []


def try_kill_import(c, rng, work):
    """`opt4store import` of an .npy file killed at a random moment; the
    store must open, serve only right rows, verify clean, and a second
    import must complete it."""
    path = os.path.join(work, "store")
    n = 2000  # an import of 2 to 30 MiB takes 0.1 to 0.6 s here
    rows = _npy(work, n, rng)
    create = c.run_cli("create", path, "--dataset-size", n, "--disk", "64MiB")
    if create.returncode != 0:
        return {"wrong": 0, "failures": [f"create: {create.stderr[-300:]}"]}
    proc = subprocess.Popen([c.cli, "import", path, "--from", rows], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    failures = _kill_then_verify(c, rng, proc, 0.35, path, "a killed import")
    wrong, _, stored = outcome(c.check(path, n, "rows:" + rows), failures, "after the kill: ")
    again = c.run_cli("import", path, "--from", rows)
    if again.returncode != 0:
        failures.append(f"import again: {again.stderr[-300:]}")
    w2, _, full = outcome(c.check(path, n, "rows:" + rows), failures, "after import again: ")
    if not failures and full != n:
        failures.append(f"after a second import {full} of {n} rows are served")
    return {"wrong": wrong + w2, "failures": failures, "detail": f"{stored} rows before"}


def try_kill_compact(c, rng, work):
    """kill -9 of a training process whose disk budget (1 MiB, segments of
    128 KiB) holds a sixth of its data: it evicts and compacts all the time
    (about 120 compactions in 0.16 s of reads here), so the kill lands in or
    near one. (`opt4store compact` on such a store finds nothing below half
    live: the store already compacted it.)"""
    path = os.path.join(work, "store")
    n = 600
    proc = c.spawn("train", path, n, rng.choice(["flush", "none", "every"]), 0,
                   rng.randrange(1 << 30), "", "disk=1MiB", "delay=0.0005")
    wait_started(proc)
    failures = _kill_then_verify(c, rng, proc, 0.8, path, "a kill mid-compaction")
    wrong, _, stored = outcome(c.check(path, n), failures)
    return {"wrong": wrong, "failures": failures, "detail": f"{stored} of {n} served"}


def _filled_store(c, rng, work, n=300):
    path = os.path.join(work, "store")
    rows = _npy(work, n, rng)
    for args in (["create", path, "--dataset-size", n, "--disk", "64MiB"],
                 ["import", path, "--from", rows]):
        r = c.run_cli(*args)
        if r.returncode != 0:
            raise RuntimeError(f"{args[0]}: {r.stderr[-300:]}")
    return path, rows


def _damage_file(rng, file, kind):
    size = os.path.getsize(file)
    if kind == "delete":
        os.unlink(file)
    elif kind == "truncate":
        os.truncate(file, rng.randrange(0, max(size, 1)))
    elif kind == "zero_range":
        start = rng.randrange(0, max(size, 1))
        with open(file, "r+b") as f:
            f.seek(start)
            f.write(b"\0" * min(rng.randrange(1, 8192), size - start))
    elif kind == "flip_bytes":
        with open(file, "r+b") as f:
            for _ in range(rng.randrange(1, 16)):
                at = rng.randrange(0, max(size, 1))
                f.seek(at)
                byte = f.read(1) or b"\0"
                f.seek(at)
                f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
    elif kind == "append_garbage":
        with open(file, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
    return f"{kind} {os.path.basename(file)} ({size} bytes)"


def _after_damage(c, path, n, rows, failures):
    """verify first (a read may drop a corrupt record), then repair when
    the open asks for it (the check child does), then every value."""
    rc, text = c.verify(path)
    result = c.check(path, n, "rows:" + rows)
    wrong, _, stored = outcome(result, failures)
    if "error" not in result and stored < n and rc == 0 and not result.get("repaired"):
        failures.append(f"verify exited 0 but {n - stored} of {n} records are no longer "
                        f"served: {text[-200:]}")
    if "error" not in result and result.get("repaired") and stored + result["lost"] < n:
        failures.append(f"repair reported {result['lost']} lost but {n - stored} are missing")
    return wrong, stored, result


def try_corrupt_index(c, rng, work):
    """index/CURRENT or the whole index/ deleted, the MANIFEST, WAL, OPTIONS
    or a table truncated, zeroed or bit-flipped."""
    n = 300
    path, rows = _filled_store(c, rng, work, n)
    index = os.path.join(path, "index")
    choice = rng.choice(["current", "index_dir", "file", "file", "file"])
    if choice == "current":
        os.unlink(os.path.join(index, "CURRENT"))
        what = "delete CURRENT"
    elif choice == "index_dir":
        shutil.rmtree(index)
        what = "delete index/"
    else:
        files = sorted(f for f in os.listdir(index)
                       if f.startswith(("MANIFEST", "OPTIONS")) or f.endswith((".log", ".sst")))
        what = _damage_file(rng, os.path.join(index, rng.choice(files)),
                            rng.choice(["truncate", "zero_range", "flip_bytes", "delete"]))
    failures = []
    wrong, stored, result = _after_damage(c, path, n, rows, failures)
    return {"wrong": wrong, "failures": failures,
            "detail": f"{what}: {stored} of {n} served, repaired={result.get('repaired')}"}


def try_corrupt_segment(c, rng, work):
    """A segment file deleted, truncated, zeroed in part, bit-flipped or
    given a garbage tail."""
    n = 300
    path, rows = _filled_store(c, rng, work, n)
    segdir = os.path.join(path, "segments")
    files = sorted(os.listdir(segdir))
    what = _damage_file(rng, os.path.join(segdir, rng.choice(files)),
                        rng.choice(["delete", "truncate", "zero_range", "flip_bytes",
                                    "append_garbage"]))
    failures = []
    wrong, stored, _ = _after_damage(c, path, n, rows, failures)
    return {"wrong": wrong, "failures": failures, "detail": f"{what}: {stored} of {n} served"}


def _outlive_kill(c, proc, path, n, timeout, who, hung):
    """After a kill of a worker or rank beside it: proc must finish or raise
    an opt4store.Error (its report says which, and counts the wrong values it
    saw), not hang; then every value of the store is checked. Returns
    (wrong, failures, proc's report)."""
    try:
        out, err = proc.communicate(timeout=timeout)
        report = last_json(subprocess.CompletedProcess([], proc.returncode, out, err))
    except subprocess.TimeoutExpired:
        kill_group(proc)
        report = {"error": hung}
    failures = []
    if "error" in report:
        failures.append(report["error"])
    elif report.get("raised") and not report.get("expected"):
        failures.append(f"{who}raised {report['raised']}")
    wrong, _, _ = outcome(c.check(path, n), failures)
    return wrong + report.get("wrong", 0), failures, report


def try_kill_worker(c, rng, work):
    """A DataLoader worker of a training process killed with SIGKILL: the
    training process must raise (an opt4store.Error, or torch's "worker
    exited unexpectedly") or finish, not hang; the store must then open
    and serve right values."""
    path = os.path.join(work, "store")
    n = 600
    proc = c.spawn("train", path, n, rng.choice(["flush", "every"]), 2,
                   rng.randrange(1 << 30), "", "delay=0.005")  # 1.5 s for epoch 0
    wait_started(proc)
    time.sleep(rng.uniform(0.1, 1.2))
    workers = []
    for _ in range(50):  # the loader starts its workers at the first iter()
        workers = kids.children_of(proc.pid)
        if workers:
            break
        time.sleep(0.01)
    if workers:
        os.kill(rng.choice(workers), signal.SIGKILL)
    wrong, failures, report = _outlive_kill(
        c, proc, path, n, timeout=90, who="",
        hung="the training process hung after its worker was killed")
    return {"wrong": wrong, "failures": failures,
            "detail": f"workers {len(workers)}, raised {report.get('raised')}"}


def try_kill_ddp_rank(c, rng, work):
    """Two local ranks sharing one store (shared="local"), one killed with
    SIGKILL mid-epoch: the other must finish or raise an opt4store.Error,
    not hang; the store must then open and serve right values."""
    path = os.path.join(work, "store")
    n = 1024  # 4 ms a load: 2 s for a rank's first epoch
    seed = rng.randrange(1 << 30)
    ranks = [c.spawn("rank", path, n, r, seed) for r in (0, 1)]
    for r in ranks:
        wait_started(r)
    time.sleep(rng.uniform(0.0, 2.0))
    victim = rng.choice([0, 1])
    kill_group(ranks[victim])
    wrong, failures, report = _outlive_kill(
        c, ranks[1 - victim], path, n, timeout=60, who=f"rank {1 - victim} ",
        hung=f"rank {1 - victim} hung after rank {victim} was killed")
    return {"wrong": wrong, "failures": failures,
            "detail": f"rank {victim} killed; the other: {report.get('raised') or 'finished'}"}


def try_full_disk(c, rng, work):
    """A 16 MiB tmpfs (in a mount namespace of its own) filled by another
    file while values are stored: NoSpaceError, values still served, a
    reopen on the full disk, verify, and writes again once space is back."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return {"skipped": "needs root and unshare(1) to mount a small tmpfs"}
    mnt = os.path.join(work, "fs")
    os.makedirs(mnt)
    script = 'mount -t tmpfs -o size=16m opt4store-campaign "$1" && shift && exec "$@"'
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", mnt,
         sys.executable, "-m", "fault_campaign_children", "full_disk", mnt,
         str(rng.randrange(1 << 30))], env=c.env, capture_output=True, text=True, timeout=300)
    result = last_json(proc)
    failures = []
    wrong, _, _ = outcome(result, failures)
    return {"wrong": wrong, "failures": failures, "detail": result.get("detail", "")}


def run_bad_input_python(c, seed, tries, work):
    """`tries` random calls of the public API with bad values, in one
    interpreter (bench/fault_campaign_children.py, bad_python); a list of
    per-try results."""
    proc = c.python("bad_python", work, seed, tries, timeout=600)
    result = last_json(proc)
    if "results" not in result:
        return [{"wrong": 0, "failures": [result.get("error", "no result")]}]
    return result["results"]


def try_bad_input_cli(c, rng, work):
    """A bad command line (wrong numbers, units, paths, files, flags) against
    a good store: a non-zero exit with a message, no signal, no hang, and
    the store unharmed."""
    n = 50
    path, rows = _filled_store(c, rng, work, n)
    args = kids.bad_cli_args(rng, path, rows, work)
    failures = []
    try:
        r = c.run_cli(*args, timeout=60)
        if r.returncode < 0:
            failures.append(f"{args}: died by signal {-r.returncode}")
        elif r.returncode == 0:
            failures.append(f"{args}: accepted (exit 0)")
        elif not r.stderr.strip():
            failures.append(f"{args}: exit {r.returncode} without a message")
        elif any(w in r.stderr for w in ("terminate called", "Traceback", "Assertion")):
            failures.append(f"{args}: {r.stderr[-200:]}")
    except subprocess.TimeoutExpired:
        failures.append(f"{args}: hung")
    wrong, _, stored = outcome(c.check(path, n, "rows:" + rows), failures)
    if stored != n:
        failures.append(f"{args}: the store serves {stored} of {n} afterwards")
    return {"wrong": wrong, "failures": failures, "detail": " ".join(map(str, args[:3]))}


CLASSES = {name: globals().get("try_" + name) for name in TRIES}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("OPT4STORE_BUILD_DIR",
                                                      os.path.join(ROOT, "build")))
    ap.add_argument("--scale", type=float, default=1.0, help="tries per class times this")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--only", default="", help="comma-separated classes")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "faults.json"))
    ap.add_argument("--merge", action="store_true",
                    help="keep the other classes of an existing --out file")
    args = ap.parse_args()
    c = Campaign(args.build, args.seed)
    only = [x for x in args.only.split(",") if x] or list(TRIES)
    load_at_start = list(os.getloadavg())
    classes = {}
    for name in only:
        tries = max(1, round(TRIES[name] * args.scale))
        rec = {"tries": 0, "wrong": 0, "acked_lost": 0, "failures": [], "skipped": None,
               "seconds": 0.0, "seed": args.seed,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "details": []}
        t0 = time.time()
        batch = None
        if name == "bad_input_python":
            work = tempfile.mkdtemp(prefix=f"o4s-{name}-")
            batch = run_bad_input_python(c, args.seed, tries, work)
            shutil.rmtree(work, ignore_errors=True)
            tries = len(batch)
        for k in range(tries):
            seed = args.seed * 1000 + list(TRIES).index(name) * 100000000 + k
            if batch is not None:
                r = batch[k]
            else:
                rng = random.Random(seed)
                work = tempfile.mkdtemp(prefix=f"o4s-{name}-")
                try:
                    r = CLASSES[name](c, rng, work)
                except Exception as e:  # the campaign's own trouble: a failure, kept
                    r = {"wrong": 0, "failures": [f"campaign: {type(e).__name__}: {e}"]}
                finally:
                    shutil.rmtree(work, ignore_errors=True)
            if r.get("skipped"):
                rec["skipped"] = r["skipped"]
                break
            rec["tries"] += 1
            rec["wrong"] += r.get("wrong", 0)
            rec["acked_lost"] += r.get("acked_lost", 0)
            rec["failures"] += [f"seed {seed}: {f}" for f in r.get("failures", [])]
            rec["details"].append(r.get("detail", ""))
            print(f"{name} {k + 1}/{tries}: wrong {r.get('wrong', 0)}, "
                  f"failures {len(r.get('failures', []))} ({r.get('detail', '')})", flush=True)
        rec["seconds"] = round(time.time() - t0, 1)
        classes[name] = rec
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f)
        kept = old["classes"]
        for rec in kept.values():  # a file from before per-class seeds
            rec.setdefault("seed", old.get("seed"))
            rec.setdefault("date", old.get("date"))
        kept.update(classes)
        classes = {name: kept[name] for name in TRIES if name in kept}
    out = {
        "machine": {"cpus": os.cpu_count(), "cpu_model": cpu_model(),
                    "python": platform.python_version(), "kernel": platform.release(),
                    "load_average_at_start": load_at_start},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seed": sorted({r["seed"] for r in classes.values()}, key=str), "scale": args.scale,
        "seconds": round(sum(r["seconds"] for r in classes.values()), 1),
        "classes": classes,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    total = sum(r["tries"] for r in classes.values())
    bad = sum(r["wrong"] + r["acked_lost"] + len(r["failures"]) for r in classes.values())
    print(f"{total} tries, {bad} wrong values, lost acknowledged Puts or failures; "
          f"wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
