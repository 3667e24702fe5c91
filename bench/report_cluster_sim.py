"""bench/REPORT.md's section on the cluster simulation
(bench/cluster_sim_bench.py's cluster_sim.json): source loads, peer fetches
and network bytes per placement for 8 to 256 simulated hosts on the ImageNet
plan, with a plot, the issue's 4-host cases, and the run's time and memory."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["per-host-opt", "cluster-opt", "home-opt", "static-partition", "frequency-static"]
STYLE = {"per-host-opt": ("tab:red", "o"), "cluster-opt": ("tab:blue", "s"),
         "home-opt": ("tab:green", "^"), "static-partition": ("tab:orange", "D"),
         "frequency-static": ("tab:purple", "v")}
GIB = float(1 << 30)


def _names(result):
    return [n for n in ORDER if n in result.get("placements", {})]


def _imagenet_table(runs):
    out = ["| hosts | placement | source loads (x N) | loads / host / epoch | "
           "peer fetches / host / epoch | network / host / epoch | local hit rate |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for run in runs:
        r = run["result"]
        for name in _names(r):
            p = r["placements"][name]
            reads = p["source_loads"] + p["peer_fetches"] + p["local_hits"]
            net = p.get("network_bytes_per_host_epoch")
            out.append("| %d | %s | %.3f | %.1f | %.1f | %s | %.2f%% |" % (
                r["hosts"], name, p["source_loads_per_n"], p["source_loads_per_host_epoch"],
                p["peer_fetches_per_host_epoch"],
                "%.1f MiB" % (net / (1 << 20)) if net is not None else "-",
                100.0 * p["local_hits"] / reads if reads else 0.0))
    return out


def _cost_table(runs):
    out = ["| hosts | reads | union / dataset | wall (s) | CPU user (s) | peak RSS (MiB) |"
           " plan passes for host streams |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in runs:
        r = run["result"]
        out.append("| %d | %d | %.1fx | %.1f | %.1f | %.0f | %d |" % (
            r["hosts"], r["accesses"], r["union_ratio"], run["wall_s"], run["user_s"] or 0,
            run["max_rss_mib"] or 0, r["stream_passes"]))
    return out


def _plot(runs, path, plots, mline, save_plot):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    hosts = [run["result"]["hosts"] for run in runs]
    silent = []
    for name in _names(runs[0]["result"]):
        color, marker = STYLE.get(name, ("black", "."))
        placements = [run["result"]["placements"][name] for run in runs]
        axes[0].plot(hosts, [p["source_loads_per_n"] for p in placements], color=color,
                     marker=marker, label=name)
        net = [p.get("network_bytes_per_host_epoch", 0) / (1 << 20) for p in placements]
        if any(v > 0 for v in net):
            axes[1].plot(hosts, net, color=color, marker=marker, label=name)
        else:
            silent.append(name)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(hosts)
        ax.set_xticklabels([str(h) for h in hosts])
        ax.set_xlabel("hosts (each with RAM for 10% of the dataset)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("source loads over 90 epochs (x dataset size)")
    axes[0].set_title("Samples decoded from the source")
    axes[1].set_ylabel("MiB sent between hosts, per host per epoch")
    axes[1].set_title("Network (peer fetches + pushes)" +
                      ("; none for %s" % ", ".join(silent) if silent else ""))
    axes[0].legend(fontsize=8)
    r0 = runs[0]["result"]
    text = ("Source: %s (bench/cluster_sim_bench.py), `opt4store simulate --hosts H --json`; "
            "DistributedSampler, %d items, %d epochs, 150,528-byte items; %s. Counts are exact "
            "replays, independent of the machine." % (os.path.basename(path), r0["dataset_size"],
                                                      r0["epochs"], mline))
    return save_plot(fig, text, plots, "cluster_sim.png", bottom=0.1)


def _goal_line(runs):
    big = [run for run in runs if run["result"]["hosts"] == 256]
    if not big:
        return []
    run = big[-1]
    wall_ok = run["wall_s"] < 60
    mem_ok = (run["max_rss_mib"] or 0) * (1 << 20) <= 1e9
    return ["Goal, 256 hosts: figures in under a minute (%.1f s wall, %.1f s CPU: %s) and at "
            "most 1 GB (%.0f MiB peak RSS: %s)." % (
                run["wall_s"], run["user_s"] or 0, "met" if wall_ok else "not met",
                run["max_rss_mib"] or 0, "met" if mem_ok else "not met"), ""]


def section_cluster_sim(data, path, plots, rel, machine_line, save_plot):
    out = ["## Many hosts, one cache: the cluster simulation", ""]
    runs = data.get("imagenet") if isinstance(data, dict) else None
    if not runs:
        return out + ["`%s` holds no runs; nothing to report." % os.path.basename(path), ""]
    mline = machine_line(data, path)
    r0 = runs[0]["result"]
    out += ["Source: `%s`, written by `bench/cluster_sim_bench.py` (%s mode) through "
            "`opt4store simulate --hosts H --json`. Machine: %s. The plan: DistributedSampler "
            "over %d items (ImageNet-1k's training set), %d epochs, seed 0, one rank per host; "
            "each host's RAM holds %.0f%% of the dataset; items of %d bytes (a decoded "
            "224x224 RGB uint8 sample) turn transfers into network bytes. Placements and their "
            "rules: `engine/include/opt4store/cluster_simulator.h`. Network = peer fetches plus "
            "pushes (a load cached on another host than the reader's). Per host per epoch: "
            "the mean over hosts and epochs." % (
                os.path.basename(path), data.get("mode", "?"), mline, r0["dataset_size"],
                r0["epochs"], 100 * r0["capacity_ratio"], data.get("item_size", 0)), ""]
    out += _imagenet_table(runs) + [""]
    out += ["Command: `%s` (and the same for each H)." % runs[-1]["command"], ""]
    name = _plot(runs, path, plots, mline, save_plot)
    out += ["![source loads and network traffic by number of hosts](%s/%s)" % (rel, name), ""]
    out += ["What each run cost (the issue's goal: 256 hosts in under a minute and at most "
            "1 GB; wall time depends on the machine's load, CPU time less so; peak RSS from "
            "`/usr/bin/time -v`):", ""]
    out += _cost_table(runs) + [""] + _goal_line(runs)
    small = data.get("small") or []
    if small:
        out += ["The issue's 4-host cases (DistributedSampler, 3 epochs, exact counts):", "",
                "| items | RAM per host | placement | source loads | x N | peer fetches |"
                " local hits |", "| ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
        for run in small:
            r = run["result"]
            for pname in _names(r):
                p = r["placements"][pname]
                out.append("| %d | %.1f%% | %s | %d | %.3f | %d | %d |" % (
                    r["dataset_size"], 100 * r["capacity_ratio"], pname, p["source_loads"],
                    p["source_loads_per_n"], p["peer_fetches"], p["local_hits"]))
        out.append("")
    return out
