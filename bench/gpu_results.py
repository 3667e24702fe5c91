"""gpu_bench.py's results file: the ratios between its runs, and the merge
of results written by several commands (a GPU machine allows 10 minutes a
command) into one file."""

import json
import os
import statistics

CONFIGS = ("no_cache", "lru_ram", "opt_disk_prefetch")
TRANSFERS = ("copy", "to_device", "loader")


def ratios(results):
    """Per model and worker count: each configuration's total against no_cache
    with the same transfer (the native loader, which needs a store, against
    no_cache's copy), and to_device and the native loader against copy."""
    out = {}
    for model, by_workers in results.items():
        for workers, runs in by_workers.items():
            r = {}
            for transfer in TRANSFERS:
                base = runs.get(f"no_cache/{transfer}") or runs.get("no_cache/copy")
                for config in CONFIGS[1:]:
                    run_ = runs.get(f"{config}/{transfer}")
                    if base and run_:
                        r[f"{config}/{transfer} vs no_cache"] = run_["total"] / base["total"]
            for config in CONFIGS:
                for transfer in TRANSFERS[1:]:
                    a, b = runs.get(f"{config}/{transfer}"), runs.get(f"{config}/copy")
                    if a and b:
                        r[f"{config}: {transfer} vs copy"] = a["total"] / b["total"]
            out[f"{model}/{workers}"] = r
    return out


def pace_counts(batches):
    """{"on_thread": batches to_device's background thread staged,
    "trials": the pace's trials} for `batches` (a DeviceLoader, or an
    opt4store.DataLoader with device=), or None for a loop with no
    DeviceLoader."""
    device_loader = getattr(batches, "_on_device", batches)
    if not hasattr(device_loader, "batches_on_thread"):
        return None
    return {"on_thread": device_loader.batches_on_thread, "trials": device_loader.trials}


def skip_without_gpu(json_path, machine):
    """gpu_bench's run on a machine with no CUDA device: results from a GPU
    machine already at json_path stay (the report shows their date); else
    a file saying why nothing ran. Returns the exit status, 0."""
    reason = "no CUDA device (torch.cuda.is_available() is False on this machine)"
    print(f"gpu_bench: skipped: {reason}")
    try:
        with open(json_path) as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        earlier = {}
    if earlier.get("results") or earlier.get("heavy"):
        print(f"gpu_bench: kept the results of {earlier['machine'].get('date')} "
              f"({earlier['machine'].get('gpu')}) in {json_path}")
        return 0
    with open(json_path, "w") as f:
        json.dump({"skipped": reason, "machine": machine}, f, indent=1)
    return 0


FIXED_SETTINGS = ("images", "epochs", "batch", "ram_ratio", "amp", "jpeg_side")


def merge_setting(blocks, name):
    """One setting's block from the parts that ran it (or, when none did,
    the first part's empty block)."""
    ran = [b for b in blocks if b.get("results")] or blocks[:1]
    first = ran[0]
    for b in ran[1:]:
        if any(b["settings"].get(k) != first["settings"].get(k) for k in FIXED_SETTINGS):
            raise SystemExit(f"gpu_bench: the {name} runs differ in " + ", ".join(FIXED_SETTINGS))
    out = {"settings": dict(first["settings"]), "results": {}, "floor": {}, "paired": {}}
    for b in ran:
        for model, by_workers in b["results"].items():
            out["results"].setdefault(model, {}).update(by_workers)
            out["paired"].setdefault(model, {}).update(b.get("paired", {}).get(model, {}))
            if model in b.get("floor", {}):
                out["floor"][model] = b["floor"][model]
    decode = [b["settings"].get("decode_ms_per_sample") for b in ran]
    decode = [d for d in decode if d is not None]
    out["settings"]["decode_ms_per_sample"] = statistics.median(decode) if decode else None
    if len(decode) > 1:
        out["settings"]["decode_ms_per_sample_by_run"] = decode
    out["settings"]["models"] = list(out["results"])
    out["settings"]["workers"] = sorted({int(w) for r in out["results"].values() for w in r})
    out["ratios"] = ratios(out["results"])
    return out


def merge(paths, out_path, note=None):
    """One results file from runs split across commands (the GPU machine
    allows 10 minutes a command). They must share the machine kind and, per
    setting, the settings other than models and workers. A model's floor is
    the one measured by the run that holds its results (the last such run
    when several do; each run's epoch_vs_floor stays as measured)."""
    parts = []
    for p in paths:
        with open(p) as f:
            parts.append(json.load(f))
    if any(p.get("skipped") for p in parts):
        raise SystemExit("gpu_bench: cannot merge a skipped run")
    first = parts[0]
    for p in parts[1:]:
        if p["machine"].get("gpu") != first["machine"].get("gpu"):
            raise SystemExit("gpu_bench: runs come from different GPUs")
    out = {"machine": first["machine"], **merge_setting(parts, "standard")}
    heavy = [p["heavy"] for p in parts if p.get("heavy")]
    if heavy:
        out["heavy"] = merge_setting(heavy, "heavy")
    out["wrong"] = sum(p["wrong"] for p in parts)
    out["took_s"] = sum(p["took_s"] for p in parts)
    out["merged_from"] = [os.path.basename(p) for p in paths]
    out["loads_at_start"] = [p["machine"].get("load", [None])[0] for p in parts]
    if note:
        out["note"] = note
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {out_path} from {len(parts)} runs; {out['wrong']} wrong samples")
    return 1 if out["wrong"] else 0
