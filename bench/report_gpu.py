"""bench/REPORT.md's section on GPU training (bench/gpu_bench.py's
gpu_bench.json): the runs per setting, the GPU floor, the paired part, the
ratios, and issue 17's goals judged from them."""

import os
import statistics


# What issue 17 asks of the GPU runs; judged in section_gpu from the JSON.
GPU_GOALS = (
    ("opt + disk + prefetch, whole run vs no cache, same transfer, 0 workers",
     "below the published ratio"),
    ("cached epochs (2..E) of opt + disk + prefetch vs the GPU floor, worst epoch", "<= 1.1"),
    ("to_device (and opt4store.DataLoader(device=)) vs the blocking copy, worst configuration",
     "<= 1.0"),
    ("heavy setting, 8 workers: no cache epoch / cached epoch (2..E), means", ">= 3"),
)


# gpu_bench.py's transfers: a blocking copy, opt4store.to_device, and
# opt4store.DataLoader(device=) ("loader").
GPU_TRANSFERS = ("copy", "to_device", "loader")


def gpu_goal_rows(gb):
    """(goal index, where, measured, target text, met) for every goal the
    file can judge."""
    rows = []
    blocks = [("standard", gb)] + ([("heavy", gb["heavy"])] if gb.get("heavy") else [])
    published = (gb.get("settings") or {}).get("published_opt_vs_no_cache") or {}
    for model, by_w in (gb.get("results") or {}).items():
        for w in by_w:
            ratios = (gb.get("ratios") or {}).get("%s/%s" % (model, w), {})
            for transfer in GPU_TRANSFERS:
                v = ratios.get("opt_disk_prefetch/%s vs no_cache" % transfer)
                # The published ratios are for 0 workers, and so is the goal.
                if v is not None and model in published and w == "0":
                    rows.append((0, "%s, %s workers, %s" % (model, w, transfer), v,
                                 "< %s" % published[model], v < published[model]))
    for name, block in blocks:
        for model, by_w in (block.get("results") or {}).items():
            for w, runs in by_w.items():
                for transfer in GPU_TRANSFERS:
                    vs = (runs.get("opt_disk_prefetch/" + transfer) or {}).get("epoch_vs_floor")
                    if vs:
                        rows.append((1, "%s: %s, %s workers, %s" % (name, model, w, transfer),
                                     max(vs), "<= 1.1", max(vs) <= 1.1))
                ratios = (block.get("ratios") or {}).get("%s/%s" % (model, w), {})
                tv = {k.replace(" vs copy", ""): v for k, v in ratios.items()
                      if k.endswith(("to_device vs copy", "loader vs copy"))}
                if tv:
                    worst = max(tv, key=tv.get)
                    rows.append((2, "%s: %s, %s workers (%s)" % (name, model, w, worst),
                                 tv[worst], "<= 1.0", tv[worst] <= 1.0))
    for name, block in blocks:
        rows += paired_goal_rows(name, block.get("paired") or {})
    for model, by_w in ((gb.get("heavy") or {}).get("results") or {}).items():
        for transfer in GPU_TRANSFERS:
            speedup = heavy_speedup((by_w.get("8") or {}), transfer)
            if speedup is not None:
                rows.append((3, "%s, 8 workers, %s" % (model, transfer), speedup, ">= 3",
                             speedup >= 3))
    return rows


def paired_goal_rows(name, paired):
    """Goal rows from the paired part: each transfer's worst cached epoch
    against its floor (paired_lines), and the transfer furthest over copy, by the
    median of its rounds' ratios to the copy epoch of the same round."""
    rows = []
    for model, by_w in paired.items():
        for w, p in by_w.items():
            where = "%s: %s, %s workers" % (name, model, w)
            rounds = len(p.get("rounds") or [])
            for transfer, vs in (p.get("epoch_vs_floor") or {}).items():
                if vs:
                    rows.append((1, "%s, %s (paired, worst of %d rounds)" % (
                        where, transfer, rounds), max(vs), "<= 1.1", max(vs) <= 1.1))
            # the paired part's extra transfers are compared, not judged here
            medians = {t: statistics.median(v) for t, v in (p.get("vs_copy") or {}).items()
                       if v and t not in ("pinned", "inline", "thread")}
            if medians:
                worst = max(medians, key=medians.get)
                rows.append((2, "%s (%s; paired, median of %d rounds)" % (where, worst, rounds),
                             medians[worst], "<= 1.0", medians[worst] <= 1.0))
    return rows


def paired_lines(paired):
    """The paired part's table: per round, each transfer's cached epoch
    against the floor and the copy epoch of that round (the floor pass right
    before each epoch where the round recorded one, the round's one floor in
    the results of 2026-11-28 and before); the median steps and SM clocks
    where recorded."""
    rows = [(model, w, p) for model, by_w in paired.items() for w, p in by_w.items()]
    if not rows:
        return []
    per_epoch = all("floor_before_s" in r for _, _, p in rows for r in p["rounds"])
    out = ["Paired part: one opt + disk + prefetch store, filled in one epoch; then per round "
           "one cached epoch per transfer, in an order rotated by the round, " +
           ("each right after one pass of the GPU floor (floor s); median step = the epoch's "
            "median step over that pass's; SM MHz = the GPU clock after the pass and after "
            "the epoch; pinned = opt4store.DataLoader(pin_memory=True) and a non-blocking "
            "copy in the loop, inline = those batches through to_device(depth=0), both with "
            "no thread; thread = the same through to_device(pace=False), always on the "
            "thread. " if per_epoch else
            "after the round's GPU floor (fastest of 3). ") +
           "Values per round, in round order; seconds to 3 decimals.", ""]
    extra = ["median step vs floor's", "SM MHz"] if per_epoch else []
    head = ["model", "workers", "transfer", "floor s", "epoch s", "waited s", "vs floor",
            "vs copy"] + extra
    out += ["| " + " | ".join(head) + " |",
            "| " + " | ".join(["---", "---:"] + ["---"] * (len(head) - 2)) + " |"]
    for model, w, p in rows:
        rounds = p["rounds"]
        for transfer, vs in p["epoch_vs_floor"].items():
            floors = [r["floor_before_s"][transfer] if per_epoch else r["floor_s"]
                      for r in rounds]
            cells = [model, w, transfer, " ".join("%.3f" % f for f in floors),
                     " ".join("%.3f" % r["epoch_s"][transfer] for r in rounds),
                     " ".join("%.3f" % r["wait_s"][transfer] for r in rounds),
                     " ".join("%.2f" % v for v in vs),
                     " ".join("%.2f" % v for v in (p.get("vs_copy") or {}).get(transfer, []))
                     or "-"]
            if per_epoch:
                cells.append(" ".join("%.2f" % v for v in p["step_vs_floor"][transfer]))
                clocks = [r["sm_mhz"][transfer] for r in rounds]
                cells.append(" ".join("%s/%s" % tuple("?" if c is None else c for c in pair)
                                      for pair in clocks))
            out.append("| " + " | ".join(str(c) for c in cells) + " |")
    out += ["", "Source loads in all (each image once in the fill epoch, none after): %s;"
            " wrong samples: %s." % (
        ", ".join("%s/%s %s of %s" % (model, w, p.get("source_loads"), p.get("images", "?"))
                  for model, w, p in rows),
        sum(p.get("wrong", 0) for _, _, p in rows)), ""]
    return out


def heavy_speedup(runs, transfer):
    """Mean no-cache epoch over mean cached epoch (2..E) of opt + disk + prefetch
    (the native loader's against no cache's copy: it needs a store)."""
    base = ((runs.get("no_cache/" + transfer) or runs.get("no_cache/copy") or {})
            .get("epoch_times") or [])
    cached = ((runs.get("opt_disk_prefetch/" + transfer) or {}).get("epoch_times") or [])[1:]
    if not base or not cached:
        return None
    return (sum(base) / len(base)) / (sum(cached) / len(cached))


def gpu_setting_lines(name, block, on_gpu, num):
    """One setting's tables: the runs, the floor against the source's cost,
    the ratios."""
    st = block.get("settings") or {}
    results = block.get("results") or {}
    if not results:
        return []
    decode = st.get("decode_ms_per_sample")
    out = ["### Setting: %s%s" % (name, "" if on_gpu else " (CPU harness check, not GPU results)"),
           "",
           "%s images, per sample: %s; dataset[i] measured at %s ms a sample (median of the "
           "first %s items, one core, before the runs). Workers %s; models %s." % (
               st.get("images"), st.get("work", "decode a 512x512 JPEG, resize to 256x256"),
               num(decode) if decode is not None else "(not recorded)",
               st.get("decode_timed_items", "?"), ", ".join(str(w) for w in st.get("workers", [])),
               ", ".join(st.get("models", []))), ""]
    out += ["| model | workers | configuration | transfer | total s | epoch 1 s | later epochs s "
            "| later epochs: waited for batches s | later epochs vs floor | wrong |",
            "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    for model, by_w in results.items():
        for w, runs in by_w.items():
            for key, r in runs.items():
                config, transfer = key.split("/", 1)
                t = r.get("epoch_times") or []
                vs = r.get("epoch_vs_floor")
                waited = r.get("wait_s") or []
                out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    model, w, config, transfer, num(r.get("total")), num(t[0]) if t else "-",
                    num(sum(t[1:])) if len(t) > 1 else "-",
                    num(sum(waited[1:])) if len(waited) > 1 else "-",
                    " ".join("%.2f" % v for v in vs) + (
                        " (%.3f s)" % r["floor_s"] if r.get("floor_s") else "") if vs else "-",
                    r.get("wrong")))
    out.append("")
    floors = block.get("floor") or {}
    if floors:
        out += ["GPU floor: the same training step on one fixed batch already on the device, "
                "once per batch of an epoch (an epoch-equivalent), fastest of %s; the last "
                "columns set the source's cost per sample against the step's." % st.get(
                    "floor_repeats", "?"), "",
                "| model | floor s per epoch | steps | ms a step | step ms per sample | "
                "dataset[i] ms / step ms per sample |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for model, f in floors.items():
            per_sample = f["step_ms"] / st["batch"] if st.get("batch") else None
            out.append("| %s | %s | %s | %s | %s | %s |" % (
                model, num(f.get("epoch_s")), f.get("steps"), num(f.get("step_ms")),
                num(per_sample) if per_sample else "-",
                "%.1f" % (decode / per_sample) if decode and per_sample else "-"))
        out.append("")
    if name == "heavy":
        out += ["| model | workers | transfer | no cache s per epoch (mean) | cached epochs 2..E "
                "s (mean) | speedup |", "| --- | ---: | --- | ---: | ---: | ---: |"]
        for model, by_w in results.items():
            for w, runs in by_w.items():
                for transfer in GPU_TRANSFERS:
                    base = ((runs.get("no_cache/" + transfer) or runs.get("no_cache/copy")
                             or {}).get("epoch_times") or [])
                    cached = ((runs.get("opt_disk_prefetch/" + transfer) or {})
                              .get("epoch_times") or [])[1:]
                    if base and cached:
                        out.append("| %s | %s | %s | %s | %s | %.2fx |" % (
                            model, w, transfer, num(sum(base) / len(base)),
                            num(sum(cached) / len(cached)), heavy_speedup(runs, transfer)))
        out.append("")
    out += paired_lines(block.get("paired") or {})
    ratios = block.get("ratios") or {}
    if ratios:
        out += ["| model / workers | ratio (%s) | value |" % name, "| --- | --- | ---: |"]
        for key, r in ratios.items():
            for ratio, v in r.items():
                out.append("| %s | %s | %s |" % (key, ratio, num(v)))
        out.append("")
    return out


def section_gpu(gb, path, num, mtime):
    out = ["## GPU training with timm models", ""]
    if not isinstance(gb, dict):
        return out + ["`%s` is not a results object; nothing to report." % os.path.basename(path), ""]
    goals = ["| goal | target | verdict |", "| --- | --- | --- |"] + [
        "| %s | %s | not measured on a GPU |" % g for g in GPU_GOALS] + [""]
    if gb.get("skipped"):
        m = gb.get("machine") or {}
        return out + ["**Not measured on a GPU.** `bench/gpu_bench.py` ran on %s cores (torch %s) "
                      "on %s and skipped: %s. The GPU comparison (resnet50, "
                      "mobilenetv3_small_100, vit_base_patch16_224; batch 16, 5 epochs, AMP, "
                      "cache ratio 0.3, num_workers 0 and 8; no cache, LRU and opt + disk + "
                      "prefetch, each with a plain copy and with `to_device`; the GPU floor; "
                      "a decode-heavy setting) needs a machine with CUDA and timm; "
                      "bench/README.md says how to run it there." % (
                          m.get("cores", "?"), m.get("torch", "?"), m.get("date", mtime(path)),
                          gb["skipped"]), ""] + goals
    st = gb.get("settings", {})
    m = gb.get("machine", {})
    on_gpu = str(m.get("device", "")).startswith("cuda")
    where = ("GPU %s, CUDA %s, torch %s, timm %s, %s CPU cores, run %s" % (
        m.get("gpu"), m.get("cuda"), m.get("torch"), m.get("timm", "?"), m.get("cores"),
        m.get("date")) if on_gpu else
        "**Not measured on a GPU: CPU only (%s, torch %s, %s cores, run %s), a check of "
        "the harness; its numbers are not GPU results**" % (
            m.get("device"), m.get("torch"), m.get("cores"), m.get("date")))
    out += ["Source: `%s`, written by `bench/gpu_bench.py` (method in its docstring). %s. "
            "Batch %s, %s epochs, AMP %s, RAM %s of the decoded bytes. Seconds "
            "for all epochs (the sum of the epoch times, checks excluded), 6 significant "
            "digits; `copy` = a blocking `.to(device)` per batch, `to_device` = "
            "`opt4store.to_device`, `loader` = `opt4store.DataLoader(device=)`; waited = the "
            "training loop's time in next() on the loader (- where not recorded); later epochs "
            "vs floor = each epoch 2..E over the GPU floor taken just before that run (its "
            "seconds in brackets; without them, the model's floor below). %s wrong samples in "
            "all." % (
                os.path.basename(path), where, st.get("batch"), st.get("epochs"),
                st.get("amp"), st.get("ram_ratio"), gb.get("wrong", "?")), ""]
    loads = gb.get("loads_at_start")
    if loads:
        out += ["1-minute load average of the GPU machine when each part started (%s): %s.%s" % (
                    ", ".join(gb.get("merged_from", [])),
                    ", ".join("%.1f" % v for v in loads),
                    " " + gb["note"] if gb.get("note") else ""), ""]
    out += gpu_setting_lines("standard", gb, on_gpu, num)
    if gb.get("heavy"):
        out += gpu_setting_lines("heavy", gb["heavy"], on_gpu, num)
    ref = st.get("reference_resnet50_seconds")
    if ref:
        out += ["The reference table (its own machine and dataset), resnet50, 5 epochs: "
                "no cache %s s, LRU %s s (%.3f of no cache), its OPT %s s (%.3f). Compare "
                "the ratios, not the seconds." % (
                    ref["no_cache"], ref["lru"], ref["lru"] / ref["no_cache"], ref["opt"],
                    ref["opt"] / ref["no_cache"]), ""]
    out += ["### Goals", ""]
    if not on_gpu:
        return out + goals
    rows = gpu_goal_rows(gb)
    out += ["| goal | where | measured | target | verdict |", "| --- | --- | ---: | --- | --- |"]
    for k, (goal, target) in enumerate(GPU_GOALS):
        judged = [r for r in rows if r[0] == k]
        for _, where_, v, target_, met in judged:
            out.append("| %s | %s | %s | %s | %s |" % (goal, where_, num(v), target_,
                                                       "met" if met else "**MISSED**"))
        if not judged:
            out.append("| %s | - | - | %s | not in this file |" % (goal, target))
    out.append("")
    return out
