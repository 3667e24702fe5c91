"""bench/REPORT.md's section on many hosts as one cache (issue 16):
bench/cluster_bench.py's cluster.json (and cluster_workers2.json, the same
run with 2 DataLoader workers per host, when present)."""

import os


def _rows(data):
    out = []
    for name, label in (("local", "a store per host (shared=\"local\")"),
                        ("cluster", "one cache (shared=\"cluster\")")):
        r = data.get(name)
        if not isinstance(r, dict):
            continue
        st = r.get("stats", {})
        out.append("| %s | %s | %s | %s | %.2f N | %s | %s | %s |" % (
            label, data.get("workers"), " | ".join("%.3f" % t for t in r.get("epoch_s", [])),
            r.get("epochs_2_3_s"), r.get("source_loads", 0) / max(1, data.get("images", 1)),
            st.get("peer_hits"), st.get("peer_bytes_in"), r.get("wrong")))
    return out


def section_cluster(runs, machine_line):
    """runs: [(data, path)] of cluster_bench.py results."""
    out = ["## Many hosts, one cache (shared=\"cluster\")", ""]
    if not runs:
        return out
    data, path = runs[0]
    out += ["Source: %s, written by `bench/cluster_bench.py`. Machine: %s. %s hosts as %s "
            "processes on this machine (gloo on 127.0.0.1), %s JPEGs decoded to 3x256x256 "
            "uint8, %s epochs of a shuffling DistributedSampler, batch %s, torch's DataLoader "
            "over a CachedDataset, an all_reduce per batch (lockstep, as DDP), ram_items=%s per "
            "host (25%% of the dataset + 2 x peer_window=%s for items in flight, the same for "
            "both), no disk tier. Epoch times are the slowest host's, in seconds; source "
            "loads are the whole cluster's; peer_hits and peer_bytes_in are summed over hosts. "
            "The 12.5%% row is a third run, cluster stores with ram_items=N/8 and a smaller "
            "peer_window, set against one offline OPT cache (Belady) over the cluster's reads in "
            "lockstep order at the same total RAM: hosts x (N/8 + 2 x peer_window), since the "
            "room for arrivals is RAM too."
            % (", ".join("`%s`" % os.path.basename(p) for _, p in runs), machine_line(data, path),
               data.get("hosts"), data.get("hosts"), data.get("images"), data.get("epochs"),
               data.get("batch"), data.get("ram_items_per_host"), data.get("peer_window")), "",
            "| stores | workers | epoch 1 | epoch 2 | epoch 3 | epochs 2-3 | source loads | "
            "peer_hits | peer_bytes_in | wrong |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for d, _ in runs:
        out += _rows(d)
    out += ["", "| goal | measured | target | |", "| --- | ---: | ---: | --- |"]
    for d, _ in runs:
        s = d.get("speedup_epochs_2_3")
        if s is not None:
            out.append("| epochs 2-3, one cache vs a store per host, %s workers | %.2f | >= 2 | %s |"
                       % (d.get("workers"), s, "met" if s >= 2 else "MISSED"))
        one, per_host = d.get("cluster", {}).get("epoch_s"), d.get("local", {}).get("epoch_s")
        if one and per_host:
            out.append("| epoch 1, one cache / a store per host, %s workers | %.2f | | |"
                       % (d.get("workers"), one[0] / per_host[0]))
        small = d.get("cluster_12_5")
        if isinstance(small, dict) and small.get("union_opt_loads"):
            ratio = small["source_loads"] / small["union_opt_loads"]
            out.append("| source loads at 12.5%% RAM (ram_items=%s, peer_window=%s) / one OPT "
                       "cache of %s items over the cluster's reads (%s / %s), %s workers, %s wrong | "
                       "%.3f | <= 1.02 | %s |"
                       % (small.get("ram_items_per_host"), small.get("peer_window"),
                          small.get("union_items"), small["source_loads"],
                          small["union_opt_loads"], d.get("workers"), small.get("wrong"), ratio,
                          "met" if ratio <= 1.02 else "MISSED"))
        c = d.get("cluster", {}).get("source_loads")
        if c is not None:
            out.append("| source loads of the cluster / N, %s workers | %.2f | 1 | %s |"
                       % (d.get("workers"), c / d["images"], "met" if c == d["images"] else
                          "MISSED"))
    return out + [""]
