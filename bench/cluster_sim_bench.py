#!/usr/bin/env python3
"""Cluster simulation (issue 16): where a cluster's reads are served when H
hosts share one cache, from `opt4store simulate --hosts H --json`.

Two sets of runs, one CLI call each, every placement in each call
(per-host-opt, cluster-opt, home-opt, static-partition, frequency-static):

  imagenet  DistributedSampler over 1,281,167 items, 90 epochs, seed 0, one
            rank per host, H = 8, 16, 32, 64, 128, 256, each host's RAM
            10% of the dataset, items of 150,528 bytes (a decoded 224x224 RGB
            uint8 sample) so that transfers become network bytes. Each run
            is timed and its peak memory read with /usr/bin/time -v.
  small     the issue's 4-host goals: 10,000 items, 3 epochs, 4 hosts at 25%
            and at 12.5% of the dataset each.

--quick: H = 8 and 256 only, 10 epochs, written to bench/results/tmp/
(git-ignored) so it never overwrites the full figures.

Usage: /usr/bin/python3 bench/cluster_sim_bench.py [--quick] [--cli PATH]
       [--json FILE]

The CLI is found as bench/hitrate_lab.py finds it. Exit status 0 when every
run succeeded, 1 when a CLI call failed.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hitrate_lab import find_cli, machine_facts  # noqa: E402

IMAGENET_N = 1281167
ITEM_SIZE = 150528


def timed_simulate(cli, args):
    """Runs the CLI under /usr/bin/time -v: its JSON, wall and CPU seconds,
    and peak RSS."""
    cmd = ["/usr/bin/time", "-v", cli, "simulate", *args, "--json"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError("command failed (exit %d): %s\n%s" %
                           (proc.returncode, " ".join(cmd), proc.stderr.strip()))

    def field(name):
        m = re.search(r"^\s*%s: (\S+)" % re.escape(name), proc.stderr, re.M)
        return float(m.group(1)) if m else None

    rss = field("Maximum resident set size (kbytes)")
    return {
        "command": " ".join(["opt4store", "simulate", *args, "--json"]),
        "wall_s": round(wall, 2),
        "user_s": field("User time (seconds)"),
        "system_s": field("System time (seconds)"),
        "max_rss_mib": round(rss / 1024, 1) if rss is not None else None,
        "result": json.loads(proc.stdout),
    }


def summary(run):
    r = run["result"]
    cells = ["%s %.3fN" % (name, p["source_loads_per_n"]) for name, p in r["placements"].items()]
    return "H=%d ratio=%g: %s; %.1f s wall, %.1f s user, %.0f MiB" % (
        r["hosts"], r["capacity_ratio"], ", ".join(cells), run["wall_s"], run["user_s"] or 0,
        run["max_rss_mib"] or 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cli")
    ap.add_argument("--json")
    args = ap.parse_args()
    cli = find_cli(args.cli)
    out = args.json or os.path.join(HERE, "results", "tmp" if args.quick else "",
                                    "cluster_sim.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)

    hosts = [8, 256] if args.quick else [8, 16, 32, 64, 128, 256]
    epochs = 10 if args.quick else 90
    facts = machine_facts()
    imagenet, small = [], []
    try:
        for h in hosts:
            run = timed_simulate(cli, [
                "--hosts", str(h), "--sampler", "distributed", "--dataset-size", str(IMAGENET_N),
                "--epochs", str(epochs), "--seed", "0", "--capacity-ratio", "0.1",
                "--item-size", str(ITEM_SIZE)])
            print(summary(run), flush=True)
            imagenet.append(run)
        for ratio in ["0.25", "0.125"]:
            run = timed_simulate(cli, [
                "--hosts", "4", "--sampler", "distributed", "--dataset-size", "10000",
                "--epochs", "3", "--seed", "0", "--capacity-ratio", ratio])
            print(summary(run), flush=True)
            small.append(run)
    except RuntimeError as e:
        print("cluster_sim_bench: %s" % e, file=sys.stderr)
        return 1
    with open(out, "w") as f:
        json.dump({"benchmark": "cluster_sim", "mode": "quick" if args.quick else "full",
                   "machine": facts, "cli": cli, "item_size": ITEM_SIZE,
                   "imagenet": imagenet, "small": small}, f, indent=1)
        f.write("\n")
    print("wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
