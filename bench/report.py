#!/usr/bin/env python3
"""Writes bench/REPORT.md and its PNG plots from the JSON results.

Reads whichever of these exist in the results directory (default
bench/results/) and skips the rest, saying so in the report:

  hitrate_lab.json   bench/hitrate_lab.py: hit rate against capacity per
                     policy (replacement), the Zipf panel, DistributedSampler
  python_bench.json  bench/python_bench.py: per-read overhead, DataLoader
  store_bench.json   store_bench: RAM hit, disk speed, prefetch wait share
  e2e.json           bench/e2e_bench.py: epoch time per configuration, the
                     paired rounds (report_e2e.py)
  faults.json        bench/fault_campaign.py: tries, wrong values and
                     failures per fault class (report_faults.py)
  loader.json        bench/loader_bench.py: torch's DataLoader against
                     opt4store.DataLoader (report_loader.py)
                     ({"machine": ..., "configs": {name: {"workers":
                     {"0": {"epoch_times": [...], ...}}}}}); partial is fine
  ddp.json           bench/ddp_bench.py: DDP on one host, two ranks sharing
                     one store, against no cache and a store per rank
                     (report_ddp.py)
  cluster.json       bench/cluster_bench.py: four hosts as one cache against a
                     store per host (report_cluster.py); cluster_workers2.json
                     the same with 2 workers per host
  gpu_bench.json     bench/gpu_bench.py: GPU training with timm models, the
                     GPU floor, the paired part, issue 17's goals
                     (report_gpu.py)
  launch.json        bench/launch_bench.py: loading inline and on a
                     background thread beside a launch-bound step, on the
                     CPU (report_launch.py)

Every number in the report is formatted straight from the JSON values (hit
rates as stored; derived ratios are the lab's own, rounded for display as
noted). Each table and figure names its source file, how it was measured
and the machine recorded in that file.

Usage: /usr/bin/python3 bench/report.py [--results DIR] [--out FILE]

--out defaults to bench/REPORT.md; the plots go to <dir of --out>/report/.
bench/suite.sh --quick passes --results bench/results/tmp --out
bench/results/tmp/REPORT.md so a quick run never overwrites the real report.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_cluster import section_cluster  # noqa: E402
from report_cluster_sim import section_cluster_sim  # noqa: E402
from report_ddp import section_ddp  # noqa: E402
from report_launch import section_launch  # noqa: E402
from report_e2e import section_e2e  # noqa: E402
from report_faults import section_faults  # noqa: E402
from report_gpu import section_gpu  # noqa: E402
from report_loader import section_loader  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
POLICY_STYLE = {
    "opt": ("tab:red", "o", "-"), "lru": ("tab:blue", "s", "-"),
    "lfu": ("tab:green", "^", "-"), "fifo": ("tab:purple", "v", "--"),
    "random": ("tab:gray", "x", "--"), "static": ("tab:orange", "D", "-."),
    "none": ("black", ".", ":"),
}


def load(results, name):
    path = os.path.join(results, name)
    if not os.path.isfile(path):
        return None, path
    try:
        with open(path) as f:
            return json.load(f), path
    except (OSError, ValueError) as e:
        print("report.py: cannot read %s: %s" % (path, e), file=sys.stderr)
        return None, path


def mtime(path):
    """When a results file was written: its last commit when git tracks it
    unchanged (a clone's files all carry the checkout's time), else its
    modification time."""
    t = None
    try:
        here = os.path.dirname(os.path.abspath(path))
        changed = subprocess.run(["git", "status", "--porcelain", "--", path], cwd=here,
                                 capture_output=True, text=True, check=True).stdout.strip()
        if not changed:
            stamp = subprocess.run(["git", "log", "-1", "--format=%ct", "--", path], cwd=here,
                                   capture_output=True, text=True, check=True).stdout.strip()
            if stamp:
                t = datetime.datetime.fromtimestamp(int(stamp), datetime.timezone.utc)
    except (OSError, subprocess.CalledProcessError, ValueError):
        t = None
    if t is None:
        t = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M UTC")


def machine_line(data, path):
    """The machine as the JSON file records it; what it lacks is said."""
    m = data.get("machine") if isinstance(data, dict) else None
    parts = []
    if isinstance(m, dict):
        cpus = m.get("cpus", m.get("cores"))
        parts.append("%s cores" % cpus if cpus is not None else "cores not recorded")
        model = m.get("cpu_model") or m.get("cpu")
        parts.append("CPU %s" % model if model else "CPU model not recorded")
        if m.get("mem_total_mib"):
            parts.append("%s MiB RAM" % m["mem_total_mib"])
        date = m.get("date_utc") or m.get("date")
        load_avg = m.get("load_average_at_start", m.get("load"))
    elif isinstance(m, str):
        parts.append("%s (as recorded)" % m)
        date = data.get("date_utc") or data.get("date")
        load_avg = data.get("load_average")
    else:
        parts.append("machine not recorded")
        date, load_avg = None, None
    if date:
        parts.append("run %s" % date)
    else:
        parts.append("date not recorded (file written %s)" % mtime(path))
    if load_avg is not None:
        la = load_avg if isinstance(load_avg, str) else " ".join("%.2f" % x for x in load_avg)
        parts.append("load average at start %s" % la)
    return "; ".join(parts)


def num(x):
    """A JSON number for display: floats with more than 6 significant digits
    are shown to 6 (the sections that use this say so); the rest as stored."""
    if isinstance(x, float) and len(repr(x).lstrip("-0.").replace(".", "")) > 6:
        return "%.6g" % x
    return str(x)


def save_plot(fig, text, plots, name, bottom=0.06):
    """Captions the figure with how it was measured, writes plots/name, closes it."""
    fig.text(0.01, 0.005, text, fontsize=7, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(os.path.join(plots, name), dpi=110)
    plt.close(fig)
    return name


def curve_table(points, policies):
    lines = ["| capacity ratio | capacity (items) | " + " | ".join(policies) + " |",
             "| ---: | ---: | " + " | ".join("---:" for _ in policies) + " |"]
    for pt in points:
        lines.append("| %s | %s | " % (pt["capacity_ratio"], pt["capacity"]) +
                     " | ".join(str(pt["hit_rate"][p]) for p in policies) + " |")
    return lines


def plot_curve(ax, points, policies, title):
    xs = [pt["capacity_ratio"] for pt in points]
    for p in policies:
        color, marker, ls = POLICY_STYLE.get(p, (None, "o", "-"))
        ax.plot(xs, [pt["hit_rate"][p] for pt in points], label=p, color=color,
                marker=marker, linestyle=ls, markersize=4)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("cache capacity / dataset items")
    ax.set_ylabel("hit rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)


def section_hitrate(lab, path, plots, rel):
    out = []
    mline = machine_line(lab, path)
    how_cli = "the `opt4store simulate --json` CLI (`%s`), %s mode" % (
        os.path.basename(lab.get("cli", "opt4store")), lab.get("mode", "?"))
    out += ["## Hit-rate lab", "",
            "Source: `%s`, written by `bench/hitrate_lab.py` through %s. "
            "Machine: %s. Hit rates are exact counts from replaying the plan, so they do "
            "not depend on the machine; only the run date does." % (
                os.path.basename(path), how_cli, mline), ""]

    repl = lab.get("replacement")
    if repl:
        pol = repl["policies"]
        fig, ax = plt.subplots(figsize=(7, 4.8))
        plot_curve(ax, repl["points"], pol, "Hit rate vs capacity: %s (%d reads)" % (
            repl["plan"], repl["accesses"]))
        ax.legend(fontsize=8, ncol=2)
        name = save_plot(fig, "opt4store simulate, sampler replacement, N=%d, %d epochs, seed in "
                         "plan; %s" % (repl["dataset_size"], repl["epochs"], mline),
                         plots, "hitrate_replacement.png", bottom=0.05)
        out += ["### Sampling with replacement", "",
                "%d items, %d epochs of %d draws with replacement (`%s`), %d reads, %d distinct ids. "
                "Command: `%s`." % (repl["dataset_size"], repl["epochs"], repl["dataset_size"],
                                    repl["plan"], repl["accesses"], repl["distinct_ids"],
                                    repl["command"]), "",
                "![hit rate vs capacity, replacement](%s/%s)" % (rel, name), ""]
        out += curve_table(repl["points"], pol) + [""]

    zipf = lab.get("zipf")
    if zipf and zipf.get("runs"):
        runs = zipf["runs"]
        pol = zipf["policies"]
        fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 4.2), sharey=True)
        if len(runs) == 1:
            axes = [axes]
        for ax, run in zip(axes, runs):
            plot_curve(ax, run["points"], pol, "Zipf alpha=%s (%d distinct ids)" % (
                run["alpha"], run["distinct_ids"]))
        axes[0].legend(fontsize=7, ncol=2)
        name = save_plot(fig, "opt4store simulate --plan zipf.npy, N=%d, %d reads, "
                         "numpy-generated; %s" % (zipf["dataset_size"], zipf["reads"], mline),
                         plots, "hitrate_zipf.png")
        out += ["### Zipf-skewed reads", "",
                "%d reads over %d items; rank k has weight k^-alpha, ranks permuted onto ids; "
                "generator: %s. Capacity ratios are of the %d items." % (
                    zipf["reads"], zipf["dataset_size"], runs[0]["generator"],
                    zipf["dataset_size"]), "",
                "![hit rate vs capacity, Zipf](%s/%s)" % (rel, name), ""]
        for run in runs:
            out += ["Zipf alpha = %s, %d distinct ids, command `%s`:" % (
                run["alpha"], run["distinct_ids"], run["command"]), ""]
            out += curve_table(run["points"], pol) + [""]

    dist = lab.get("distributed")
    if dist and dist.get("rows"):
        seeds = dist.get("spread_seeds") or []
        out += ["### DistributedSampler shards", "",
                "Rank 0's plan of a shuffled DistributedSampler, %d items, %d epochs; the "
                "per-node cache is a share of the whole dataset. opt/static is the lab's "
                "ratio of the two hit rates, rounded to 2 decimals here (full precision in "
                "the JSON); the last column is its range over sampler seeds %s." % (
                    dist["dataset_size"], dist["epochs"],
                    "%d-%d" % (seeds[0], seeds[-1]) if seeds else "(none)"), "",
                "| W | cache / dataset | capacity (items) | reads | distinct ids | opt | lru | static | opt/static | opt/static over seeds |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in dist["rows"]:
            ratio = r.get("opt_over_static")
            spread = [x for x in r.get("opt_over_static_by_seed", []) if x is not None]
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["world"], r["capacity_ratio_of_dataset"], r["capacity"], r["accesses"],
                r["distinct_ids"], r["hit_rate"]["opt"], r["hit_rate"]["lru"],
                r["hit_rate"]["static"], "%.2fx" % ratio if ratio is not None else "-",
                "%.2fx .. %.2fx" % (min(spread), max(spread)) if spread else "-"))
        out += ["", "Commands: `%s` (and the same for each W and capacity)." %
                dist["rows"][0]["command"], ""]
    return out


def section_python(pb, path):
    out = ["## Python per-read overhead and DataLoader", "",
           "Source: `%s`, written by `bench/python_bench.py` (see its docstring for the "
           "method); floats shown to 6 significant digits. Machine: %s; torch %s, Python %s." % (
               os.path.basename(path), machine_line(pb, path), pb.get("torch", "?"),
               pb.get("python", "?")), ""]
    pr = pb.get("per_read")
    if pr:
        out += ["| per read (median of %s rounds of %s reads) | us |" % (
                    pr.get("rounds"), pr.get("reads_per_round")),
                "| --- | ---: |",
                "| dict lookup + clone | %s |" % num(pr.get("dict_clone_us")),
                "| CachedDataset RAM hit | %s |" % num(pr.get("store_hit_us")),
                "| overhead | %s |" % num(pr.get("overhead_us")), ""]
    loader = pb.get("loader")
    if loader:
        out += ["| DataLoader workers | plain samples/s | opt4store samples/s | opt4store / plain |",
                "| ---: | ---: | ---: | ---: |"]
        for w, row in sorted(loader.items(), key=lambda kv: int(kv[0])):
            out.append("| %s | %s | %s | %s |" % (
                w, num(row.get("plain_samples_per_s")), num(row.get("store_samples_per_s")),
                num(row.get("ratio_store_to_plain"))))
        out.append("")
    return out


def section_store(sb, path):
    out = ["## Store: RAM hit, disk tier, prefetch", "",
           "Source: `%s`, written by store_bench (method in `bench/STORE.md`). "
           "Floats shown to 6 significant digits. Machine: %s; directory on %s." % (
               os.path.basename(path), machine_line(sb, path), sb.get("directory_fs", "?")), ""]
    out += ["| figure | value |", "| --- | ---: |",
            "| items x bytes | %s x %s |" % (sb.get("items"), sb.get("item_bytes")),
            "| RAM hit, median ns | %s |" % sb.get("ram_hit_median_ns"),
            "| reader wait share (goal %s) | %s |" % (sb.get("goal_wait_share"),
                                                     num(sb.get("measured_wait_share"))),
            "| goal met | %s |" % sb.get("goal_met")]
    for i, d in enumerate(sb.get("disk_speed") or []):
        out.append("| disk on-demand bytes/s, rep %d | %s |" % (i, num(d.get("ondemand_bytes_per_s"))))
    rpi = sb.get("ram_per_id") or {}
    if rpi.get("rss_with_plan"):
        out.append("| RSS bytes per id, with plan | %s |" % num(rpi["rss_with_plan"].get("bytes_per_id")))
    out.append("")
    return out


def section_tiers(rb, rp, db, dp):
    """The tiers against the machine's limits, measured in the same run."""
    out = ["## Tier throughput against the machine's limits", ""]
    if rb:
        out += ["RAM tier (source `%s`; method in `bench/RAM.md`). Machine: %s. %s" %
                (os.path.basename(rp), machine_line(rb, rp), rb.get("method", "")), "",
                "| destination | memcpy GB/s | RAM tier read GB/s | ratio (median) | ratio range |"
                " goal |", "| --- | ---: | ---: | ---: | --- | --- |"]
        for r in rb.get("results", []):
            out.append("| %s | %s | %s | %s | %s .. %s | >= %s |" % (
                r.get("destination"), num(r.get("memcpy_gbps")), num(r.get("read_gbps")),
                num(r.get("ratio")), num(r.get("ratio_min")), num(r.get("ratio_max")),
                rb.get("goal_ratio")))
        out.append("")
    if db:
        reads = db.get("reads", {})
        conc = reads.get("concurrent", {})
        out += ["Disk tier (source `%s`; method in `bench/DISK.md`): %s records of %s bytes, "
                "queue depth %s, io_uring %s, O_DIRECT %s. Machine: %s." % (
                    os.path.basename(dp), db.get("records"), db.get("payload_bytes"),
                    db.get("queue_depth"), reads.get("io_uring"), reads.get("direct_io"),
                    machine_line(db, dp)), "",
                "| comparison | tier / fio |", "| --- | ---: |",
                "| fio and the tier reading the same files at the same time (median) | %s |" %
                num(conc.get("ratio_median")),
                "| fio, then the tier, in turn (median of pairs) | %s |" %
                num(reads.get("ratio_median_of_pairs")),
                "| write amplification of a plain fill | %s |" %
                num(db.get("fill", {}).get("write_amplification")), "",
                "The goal's measure is the first row: both readers on the same device at the "
                "same time. Read in turn, each gets the shared virtual disk as it is during "
                "its own 3 seconds, and fio alone has ranged from 0.5 to 2.6 GB/s between "
                "runs here (bench/DISK.md), so the second row is not a speed of the tier "
                "against the hardware.", ""]
        churn = db.get("churn", [])
        if churn:
            out += ["| churn at 4x the budget, max dead fraction | write amplification |"
                    " evictions | compactions |", "| ---: | ---: | ---: | ---: |"]
            for c in churn:
                out.append("| %s | %s | %s | %s |" % (
                    c.get("max_dead_fraction"), num(c.get("write_amplification")),
                    c.get("evictions"), c.get("compactions")))
            out.append("")
        lz4 = db.get("lz4", [])
        if lz4:
            out += ["LZ4 on the benchmark's own data (a record is compressed only when that "
                    "saves at least 10%):", "",
                    "| data | ratio | stored compressed | encode MB/s | decode MB/s |",
                    "| --- | ---: | --- | ---: | ---: |"]
            for z in lz4:
                out.append("| %s | %s | %s | %s | %s |" % (
                    z.get("data"), num(z.get("ratio")), "yes" if z.get("compressed") else "no",
                    num(z.get("encode_mb_s")), num(z.get("decode_mb_s"))))
            out.append("")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--out", default=os.path.join(HERE, "REPORT.md"))
    args = ap.parse_args()

    out_dir = os.path.dirname(os.path.abspath(args.out))
    plots = os.path.join(out_dir, "report")
    os.makedirs(plots, exist_ok=True)
    rel = "report"

    lines = ["# opt4store benchmark report", "",
             "Generated by `bench/report.py` from `%s` on %s. Do not edit by hand: "
             "`bench/suite.sh BUILD_DIR` regenerates it (`--quick` writes to "
             "`bench/results/tmp/` instead)." % (
                 os.path.relpath(os.path.abspath(args.results), os.path.dirname(HERE)),
                 datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
             ""]
    missing = []
    lab, p = load(args.results, "hitrate_lab.json")
    if lab:
        lines += section_hitrate(lab, p, plots, rel)
    else:
        missing.append("hitrate_lab.json (bench/hitrate_lab.py)")
    e2e, p = load(args.results, "e2e.json")
    if e2e is not None:
        lines += section_e2e(e2e, p, plots, rel, machine_line, save_plot, num)
    else:
        missing.append("e2e.json (bench/e2e_bench.py)")
    ld, p = load(args.results, "loader.json")
    if ld is not None:
        lines += section_loader(ld, p, plots, rel, machine_line, save_plot)
    else:
        missing.append("loader.json (bench/loader_bench.py)")
    dd, p = load(args.results, "ddp.json")
    if dd is not None:
        lines += section_ddp(dd, p, machine_line)
    else:
        missing.append("ddp.json (bench/ddp_bench.py)")
    cs, p = load(args.results, "cluster_sim.json")
    if cs is not None:
        lines += section_cluster_sim(cs, p, plots, rel, machine_line, save_plot)
    else:
        missing.append("cluster_sim.json (bench/cluster_sim_bench.py)")
    runs = [r for r in (load(args.results, n) for n in ("cluster.json", "cluster_workers2.json"))
            if r[0] is not None]
    if runs:
        lines += section_cluster(runs, machine_line)
    else:
        missing.append("cluster.json (bench/cluster_bench.py)")
    gb, p = load(args.results, "gpu_bench.json")
    if gb is not None:
        lines += section_gpu(gb, p, num, mtime)
    else:
        missing.append("gpu_bench.json (bench/gpu_bench.py)")
    la, p = load(args.results, "launch.json")
    if la is not None:
        lines += section_launch(la, p, machine_line)
    else:
        missing.append("launch.json (bench/launch_bench.py)")
    pb, p = load(args.results, "python_bench.json")
    if pb:
        lines += section_python(pb, p)
    else:
        missing.append("python_bench.json (bench/python_bench.py)")
    sb, p = load(args.results, "store_bench.json")
    if sb:
        lines += section_store(sb, p)
    else:
        missing.append("store_bench.json (bench/run.sh)")
    fa, p = load(args.results, "faults.json")
    if fa:
        lines += section_faults(fa, p, machine_line)
    else:
        missing.append("faults.json (bench/fault_campaign.py)")
    rb, rp = load(args.results, "ram_bench.json")
    db, dp = load(args.results, "disk_bench.json")
    if rb or db:
        lines += section_tiers(rb, rp, db, dp)
    if not rb:
        missing.append("ram_bench.json (build/bench/ram_bench, see bench/RAM.md)")
    if not db:
        missing.append("disk_bench.json (build/bench/disk_bench, see bench/DISK.md)")
    if missing:
        lines += ["## Not in this report", "",
                  "No results file for: " + "; ".join(missing) + ".", ""]

    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("wrote %s and %s/" % (args.out, plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
