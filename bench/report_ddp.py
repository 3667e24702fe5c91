"""bench/REPORT.md's section on DDP on one host (bench/ddp_bench.py's
ddp.json): each configuration's epochs, floor, restart and source loads,
and the goals as ddp_bench.py judged them."""

import os

GOAL_NAMES = {
    "cached_epochs_4x": "epochs 2-3 at least 4x faster than no cache",
    "restart_4x": "the restarted epoch at least 4x faster than no cache's",
    "loads_once": "source loads, epochs and restart, / dataset size",
}


def _row(name, r, base, images):
    times = r.get("epoch_times", [])
    later = sum(times[1:])
    speedup = sum(base["epoch_times"][1:]) / later if base and later else float("nan")
    floor = r.get("floor") or float("nan")
    return "| %s | %s | %.2fx | %.3f | %.2f | %.3f | %.0f ms | %s + %s (%.2f N) | %s of %s |" % (
        name, " | ".join("%.3f" % t for t in times), speedup, floor,
        later / max(1, len(times) - 1) / floor, r.get("restart_time", float("nan")),
        1e3 * r.get("restart_first_batch", float("nan")), r.get("source_loads"),
        r.get("restart_source_loads"),
        (r.get("source_loads", 0) + r.get("restart_source_loads", 0)) / max(1, images),
        r.get("wrong"), r.get("checked"))


def section_ddp(data, path, machine_line):
    out = ["## DDP on one host (shared=\"local\")", ""]
    configs = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(configs, dict) or not configs:
        return out + ["`%s` holds no runs; nothing to report." % os.path.basename(path), ""]
    s = data.get("settings", {})
    images = s.get("images", 0)
    out += ["Source: `%s`, written by `bench/ddp_bench.py` (its docstring has the method). "
            "Machine: %s. %s ranks as torchrun starts them (gloo), %s JPEGs decoded to "
            "3x256x256 uint8, a shuffling DistributedSampler, batch %s a rank, drop_last, "
            "%s DataLoader workers a rank, a new loader per epoch (but for "
            "opt4store_persistent), transform after the cache: %s (opt4store_batch_aug: the "
            "same on each batch, in the loop); model: %s. RAM for %.0f%% of the decoded bytes on the host plus a disk tier (per_rank: half each). "
            "Epoch times are the slower rank's, in seconds; the floor is the same steps on "
            "one fixed batch; the restart is new rank processes that reopen the store(s) and "
            "resume from rank 0's checkpoint (the open counts); source loads are the host's, "
            "workers included." % (
                os.path.basename(path), machine_line(data, path), s.get("world"), images,
                s.get("batch"), s.get("workers"), s.get("transform"), s.get("model"),
                100 * s.get("ram_ratio", 0)), "",
            "| configuration | " + " | ".join(
                "epoch %d" % (i + 1) for i in range(s.get("epochs", 0))) +
            " | epochs 2-3 vs no cache | floor | cached epoch / floor | restart | first batch "
            "after restart | source loads | wrong |",
            "| --- | " + " | ".join("---:" for _ in range(s.get("epochs", 0))) +
            " | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    base = configs.get("no_cache")
    for name, r in configs.items():
        out.append(_row(name, r, base, images))
    out.append("")
    goals = data.get("goals")
    if isinstance(goals, dict) and goals:
        out += ["Goals (opt4store against no_cache, same run):", "",
                "| goal | measured | target | |", "| --- | ---: | ---: | --- |"]
        for key, g in goals.items():
            out.append("| %s | %.2f | %s | %s |" % (GOAL_NAMES.get(key, key), g["ratio"],
                                                    g["target"],
                                                    "met" if g.get("met") else "**MISSED**"))
        out.append("")
    return out
