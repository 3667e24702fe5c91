"""bench/REPORT.md's section on the path into the training step
(bench/loader_bench.py's loader.json): epoch times per loader, with a plot,
and the goals as loader_bench.py judged them."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def section_loader(data, path, plots, rel, machine_line, save_plot):
    out = ["## From the store into the training step (opt4store.DataLoader)", ""]
    loaders = data.get("loaders") if isinstance(data, dict) else None
    if not isinstance(loaders, dict) or not loaders:
        return out + ["`%s` holds no loader runs; nothing to report." %
                      os.path.basename(path), ""]
    mline = machine_line(data, path)
    s = data.get("settings", {})
    out += ["Source: `%s`, written by `bench/loader_bench.py`. Machine: %s. %s JPEGs decoded "
            "to 3x256x256 uint8, samples (image, index), batch %s, %s workers for every loader, "
            "a new loader per epoch, RAM for %s of the decoded bytes plus the disk tier; the "
            "restart is a new process that reopens the store (its open counts). Seconds."
            % (os.path.basename(path), mline, s.get("images"), s.get("batch"),
               s.get("workers"), "%.0f%%" % (100 * s.get("ram_ratio", 0))), ""]
    epochs = max(len(r.get("epoch_times", [])) for r in loaders.values())
    out += ["| loader | " + " | ".join("epoch %d" % (i + 1) for i in range(epochs)) +
            " | restart | first batch after restart | wrong |",
            "| --- | " + " | ".join("---:" for _ in range(epochs)) + " | ---: | ---: | ---: |"]
    for name, r in loaders.items():
        times = r.get("epoch_times", [])
        out.append("| %s | %s | %.3f | %.0f ms | %s |" % (
            name, " | ".join("%.3f" % t for t in times), r.get("restart_time", float("nan")),
            1e3 * r.get("restart_first_batch", float("nan")), r.get("wrong")))
    out.append("")
    ram = data.get("all_in_ram")
    if isinstance(ram, dict):
        out += ["All in RAM (no disk tier): opt4store.DataLoader epochs %s s; the ideal in one "
                "process: torch.stack %.3f s, a copy into reused buffers %.3f s; torch's "
                "DataLoader over the samples in a list, same workers: %s s; worker processes "
                "started in the cached epochs: %s." % (
                    " ".join("%.3f" % t for t in ram.get("opt4store", [])),
                    ram.get("ideal_stack", float("nan")), ram.get("ideal_copy", float("nan")),
                    " ".join("%.3f" % t for t in ram.get("list_loader", [])),
                    ram.get("worker_starts_cached")), ""]
    tr = data.get("transform")
    if isinstance(tr, dict):
        out += ["A flip + float transform (transform=, after the cache): no cache %s s, "
                "opt4store.DataLoader %s s." % (
                    " ".join("%.2f" % t for t in tr.get("no_cache", [])),
                    " ".join("%.2f" % t for t in tr.get("opt4store", []))), ""]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, r in loaders.items():
        times = r.get("epoch_times", []) + [r.get("restart_time")]
        ax.plot(range(1, len(times) + 1), times, marker="o", label=name)
    ax.set_xticks(range(1, epochs + 2))
    ax.set_xticklabels([str(i + 1) for i in range(epochs)] + ["restart"])
    ax.set_xlabel("epoch")
    ax.set_ylabel("epoch time (s)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    name = save_plot(fig, "bench/loader_bench.py epoch times per loader; %s" % mline, plots,
                     "loader_epoch_times.png")
    out += ["![epoch time per loader](%s/%s)" % (rel, name), ""]
    goals = data.get("goals")
    if isinstance(goals, list) and goals:
        out += ["| goal | measured | target | |", "| --- | ---: | ---: | --- |"]
        for g in goals:
            if g.get("op") == "info":
                out.append("| %s | %.2f | | |" % (g["what"], g["value"]))
                continue
            met = g["value"] >= g["goal"] if g["op"] == ">=" else g["value"] <= g["goal"]
            out.append("| %s | %.2f | %s %g | %s |" % (g["what"], g["value"], g["op"], g["goal"],
                                                       "met" if met else "MISSED"))
        out.append("")
    return out
