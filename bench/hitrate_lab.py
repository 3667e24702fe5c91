#!/usr/bin/env python3
"""Hit-rate lab (issue 5, part 1): replays sampler plans through every cache
policy with the `opt4store simulate` CLI and records the hit rates.

Three experiments, each one `opt4store simulate ... --json` call per setup:

  replacement  N items, E epochs drawn with replacement (RandomSampler with
               replacement=True, N draws per epoch), capacity ratios
               0.1 .. 0.9, policies opt, lru, lfu, fifo, random, static, none
               (one `--curve` call).
  zipf         Zipf-skewed reads: R ids drawn from a Zipf(alpha) law over N
               items (rank k has weight 1/k**alpha, ranks shuffled onto ids),
               alpha = 0.5, 1.0, 1.5, generated with numpy (seeded) and written
               to a .npy plan file, replayed with `simulate --plan FILE`.
  distributed  DistributedSampler shards: rank 0's plan for world sizes
               W = 2 and 8 (`--sampler distributed --world W --rank 0`), N
               items, E epochs, per-node caches of 5%, 10% and 20% of the
               whole dataset; opt against static (and lru).

Full mode: N = 10 000, E = 10, Zipf R = 100 000 reads. --quick: N = 2 000,
ratios 0.1, 0.3, 0.5, 0.7, 0.9, Zipf R = 20 000, and it writes to
bench/results/tmp/ (git-ignored) so it never overwrites the full figures.

Usage: /usr/bin/python3 bench/hitrate_lab.py [--quick] [--cli PATH]
       [--json FILE]

The CLI is found from --cli, else $OPT4STORE_CLI, else build/tools/opt4store
or build-store/tools/opt4store next to the repository. Exit status 0 when
every run succeeded, 1 when a CLI call failed.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
POLICIES = ["opt", "lru", "lfu", "fifo", "random", "static", "none"]


def find_cli(explicit):
    candidates = [explicit, os.environ.get("OPT4STORE_CLI"),
                  os.path.join(REPO, "build", "tools", "opt4store"),
                  os.path.join(os.path.dirname(REPO), "build-store", "tools", "opt4store")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("hitrate_lab.py: opt4store CLI not found; pass --cli or set OPT4STORE_CLI")


def machine_facts():
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if not model:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    mem_mib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_mib = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor() or "unknown",
        "arch": platform.machine(),
        "mem_total_mib": mem_mib,
        "hostname_kind": platform.system(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "load_average_at_start": list(os.getloadavg()),
    }


def simulate(cli, args):
    cmd = [cli, "simulate", *args, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("command failed (exit %d): %s\n%s" %
                           (proc.returncode, " ".join(cmd), proc.stderr.strip()))
    return " ".join(["opt4store", "simulate", *args, "--json"]), json.loads(proc.stdout)


def rates(policies_json):
    return {p: policies_json[p]["hit_rate"] for p in policies_json}


def run_replacement(cli, n, epochs, ratios, seed):
    cmd, out = simulate(cli, ["--sampler", "replacement", "--dataset-size", str(n),
                              "--epochs", str(epochs), "--seed", str(seed),
                              "--policy", ",".join(POLICIES),
                              "--capacity-ratio", ",".join("%g" % r for r in ratios),
                              "--curve"])
    points = [{"capacity_ratio": pt["capacity_ratio"], "capacity": pt["capacity"],
               "hit_rate": rates(pt["policies"]),
               "hits": {p: pt["policies"][p]["hits"] for p in pt["policies"]}}
              for pt in out["curve"]]
    return {"command": cmd, "plan": out["plan"], "dataset_size": n, "epochs": epochs,
            "accesses": out["accesses"], "distinct_ids": out["distinct_ids"],
            "policies": POLICIES, "points": points}


def zipf_plan(n, reads, alpha, seed):
    """Ids drawn from a Zipf(alpha) law over n items (finite support, so any
    alpha > 0 works): rank k in 1..n has weight k**-alpha, and the ranks are
    mapped onto ids by a seeded permutation so hot ids are spread out."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    weights /= weights.sum()
    ranks = rng.choice(n, size=reads, p=weights)
    perm = rng.permutation(n)
    return perm[ranks].astype(np.uint32)


def run_zipf(cli, n, reads, epoch_length, alphas, ratios, seed, tmpdir):
    runs = []
    for alpha in alphas:
        plan = zipf_plan(n, reads, alpha, seed)
        path = os.path.join(tmpdir, "zipf_a%g.npy" % alpha)
        np.save(path, plan)
        cmd, out = simulate(cli, ["--plan", path, "--dataset-size", str(n),
                                  "--epoch-length", str(epoch_length),
                                  "--policy", ",".join(POLICIES),
                                  "--capacity-ratio", ",".join("%g" % r for r in ratios),
                                  "--curve"])
        points = [{"capacity_ratio": pt["capacity_ratio"], "capacity": pt["capacity"],
                   "hit_rate": rates(pt["policies"])} for pt in out["curve"]]
        runs.append({"alpha": alpha, "command": cmd.replace(path, "zipf_a%g.npy" % alpha),
                     "generator": "numpy default_rng(%d): choice(n, %d, p=k**-%g normalised), "
                                  "ranks permuted onto ids" % (seed, reads, alpha),
                     "accesses": out["accesses"], "distinct_ids": out["distinct_ids"],
                     "points": points})
    return {"dataset_size": n, "reads": reads, "epoch_length": epoch_length,
            "policies": POLICIES, "runs": runs}


def run_distributed(cli, n, epochs, worlds, ratios, seed, spread_seeds):
    """Seed `seed` gives the table; seeds seed+1 .. seed+spread_seeds-1 only
    add the spread of opt/static across sampler seeds."""
    rows = []
    for world in worlds:
        for ratio in ratios:
            # Capacity is a fraction of the whole dataset (N items), not of
            # the shard: --capacity in items, so the shard size plays no part.
            capacity = max(1, int(round(ratio * n)))
            cmd, out = simulate(cli, ["--sampler", "distributed", "--world", str(world),
                                      "--rank", "0", "--dataset-size", str(n),
                                      "--epochs", str(epochs), "--seed", str(seed),
                                      "--policy", "opt,lru,static",
                                      "--capacity", str(capacity)])
            hr = rates(out["policies"])
            spread = []
            for other in range(seed, seed + spread_seeds):
                _, o = simulate(cli, ["--sampler", "distributed", "--world", str(world),
                                      "--rank", "0", "--dataset-size", str(n),
                                      "--epochs", str(epochs), "--seed", str(other),
                                      "--policy", "opt,static", "--capacity", str(capacity)])
                orate = rates(o["policies"])
                spread.append(orate["opt"] / orate["static"] if orate["static"] > 0 else None)
            rows.append({"world": world, "capacity_ratio_of_dataset": ratio,
                         "capacity": capacity, "command": cmd, "plan": out["plan"],
                         "accesses": out["accesses"], "distinct_ids": out["distinct_ids"],
                         "hit_rate": hr,
                         "opt_over_static": (hr["opt"] / hr["static"]) if hr["static"] > 0 else None,
                         "opt_over_static_by_seed": spread})
    return {"dataset_size": n, "epochs": epochs, "rank": 0,
            "spread_seeds": list(range(seed, seed + spread_seeds)), "rows": rows}


def print_curve(title, points, policies):
    print(title)
    print("  ratio " + "".join("%8s" % p for p in policies))
    for pt in points:
        print("  %5.2f " % pt["capacity_ratio"] +
              "".join("%8.4f" % pt["hit_rate"][p] for p in policies))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, under 30 s")
    ap.add_argument("--cli", help="path to the opt4store binary")
    ap.add_argument("--json", help="output file (default bench/results[/tmp]/hitrate_lab.json)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    cli = find_cli(args.cli)
    if args.quick:
        n, epochs, zipf_reads = 2000, 10, 20000
        ratios = [0.1, 0.3, 0.5, 0.7, 0.9]
        out_path = args.json or os.path.join(HERE, "results", "tmp", "hitrate_lab.json")
    else:
        n, epochs, zipf_reads = 10000, 10, 100000
        ratios = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
        out_path = args.json or os.path.join(HERE, "results", "hitrate_lab.json")
    alphas = [0.5, 1.0, 1.5]
    worlds = [2, 8]
    dist_ratios = [0.05, 0.10, 0.20]

    facts = machine_facts()
    print("hitrate_lab %s: %s, N=%d, %d epochs; %s cores, %s; %s" % (
        "quick" if args.quick else "full", cli, n, epochs, facts["cpus"],
        facts["cpu_model"], facts["date_utc"]))
    t0 = time.monotonic()
    try:
        repl = run_replacement(cli, n, epochs, ratios, args.seed)
        with tempfile.TemporaryDirectory(prefix="hitrate_lab_") as tmp:
            zipf = run_zipf(cli, n, zipf_reads, n, alphas, ratios, args.seed, tmp)
        dist = run_distributed(cli, n, epochs, worlds, dist_ratios, args.seed,
                               3 if args.quick else 5)
    except RuntimeError as e:
        print("hitrate_lab.py: %s" % e, file=sys.stderr)
        return 1
    wall = time.monotonic() - t0
    facts["load_average_at_end"] = list(os.getloadavg())

    result = {"benchmark": "hitrate_lab", "mode": "quick" if args.quick else "full",
              "machine": facts, "cli": cli, "seed": args.seed, "wall_s": wall,
              "replacement": repl, "zipf": zipf, "distributed": dist}

    print_curve("replacement: hit rate, %s, %d reads" % (repl["plan"], repl["accesses"]),
                repl["points"], POLICIES)
    for run in zipf["runs"]:
        print_curve("zipf alpha=%g: hit rate, N=%d, %d reads, %d distinct ids" % (
            run["alpha"], n, run["accesses"], run["distinct_ids"]), run["points"], POLICIES)
    print("distributed (rank 0, %d epochs): hit rate, cache as a share of the whole dataset" % epochs)
    print("  %5s %6s %8s %8s %8s %8s %10s  %s" % ("W", "cache", "items", "opt", "lru", "static",
                                                "opt/static", "opt/static, seeds %d-%d" % (
                                                    dist["spread_seeds"][0], dist["spread_seeds"][-1])))
    for r in dist["rows"]:
        ratio = r["opt_over_static"]
        spread = [x for x in r["opt_over_static_by_seed"] if x is not None]
        print("  %5d %5.0f%% %8d %8.4f %8.4f %8.4f %10s  %s" % (
            r["world"], 100 * r["capacity_ratio_of_dataset"], r["capacity"],
            r["hit_rate"]["opt"], r["hit_rate"]["lru"], r["hit_rate"]["static"],
            "%.2fx" % ratio if ratio is not None else "-",
            "%.2fx .. %.2fx" % (min(spread), max(spread)) if spread else "-"))
    print()

    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote %s (%.1f s)" % (out_path, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
