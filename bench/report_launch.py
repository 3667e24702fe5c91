"""bench/REPORT.md's section on what loading costs a launch-bound step
(bench/launch_bench.py's launch.json): per step shape, each loader inline
and on a background thread, its epochs against the floor."""

import os
import statistics


def section_launch(data, path, machine_line):
    out = ["## Loading beside a launch-bound step (CPU stand-in)", ""]
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, dict) or not runs:
        return out + ["`%s` holds no runs; nothing to report." % os.path.basename(path), ""]
    s = data.get("settings", {})
    out += ["Source: `%s`, written by `bench/launch_bench.py` (its docstring has the method). "
            "Machine: %s. No GPU: the step is %s ms of tiny torch calls on one torch thread, "
            "each dropping and retaking the GIL as a kernel launch does, then a wait with "
            "the GIL released (as a step waits for its GPU). %s items of %s uint8 with their "
            "index, batch %s, %s workers; torch (torch's DataLoader over a CachedDataset) and "
            "native (opt4store.DataLoader) over a store with every item in RAM (every read a "
            "hit; source loads %s), decoding (torch's DataLoader, no cache, each read first "
            "doing %s ms of torch arithmetic with the GIL released, as a decode). "
            "inline: the loop calls next() itself; thread: the loader advanced %s batches "
            "ahead by the background thread of `opt4store.to_device` (no copy on the CPU); "
            "paced: `to_device`'s default, each batch staged in the loop's thread or on "
            "that thread by the pace rule (on thread: its batches staged there; trials: "
            "the rule's trials of the other place). "
            "Each epoch over a floor pass (the same steps, no loading) taken just before it; "
            "medians and ranges over %s rounds; waited = the loop's time in next() (median)." % (
                os.path.basename(path), machine_line(data, path), s.get("step_ms"),
                s.get("items"), "x".join(str(d) for d in s.get("sample", [])),
                s.get("batch"), s.get("workers"), data.get("source_loads"),
                s.get("decode_ms", "-"), s.get("depth"), s.get("rounds")), "",
            "| wait ms a step | loader | place | epoch / floor, median | range | waited s | "
            "loader alone s an epoch | on thread | trials |",
            "| ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for wait, r in runs.items():
        for key, vs in r["epoch_vs_floor"].items():
            loader, place = key.split("/")
            on_thread = {"inline": 0, "thread": r["batches"][key]}.get(
                place, r.get("on_thread", {}).get(key, "-"))
            trials = r.get("trials", {}).get(key, "-")
            out.append("| %s | %s | %s | %.3f | %.2f-%.2f | %.4f | %.4f | %s | %s |" % (
                wait, loader, place, statistics.median(vs), min(vs), max(vs),
                statistics.median(r["wait_s"][key]),
                statistics.median(r["loader_alone_s"][loader]), on_thread, trials))
    return out + [""]
