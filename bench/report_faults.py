"""The fault campaign's section of bench/REPORT.md (report.py calls it),
from bench/results/faults.json, written by bench/fault_campaign.py."""

import os

NAMES = {
    "kill_training": "kill -9 of a training process (0 or 2 workers, any sync; or a "
                     "sync=\"every\" Put loop)",
    "kill_import": "kill -9 of `opt4store import`",
    "kill_compact": "kill -9 of a training process that compacts all the time (disk budget "
                    "1 MiB for 4.8 MiB of data)",
    "corrupt_index": "index damage (CURRENT or index/ deleted; MANIFEST, WAL, OPTIONS, "
                     "table cut, zeroed, flipped or deleted)",
    "corrupt_segment": "segment damage (deleted, cut, zeroed, flipped, garbage tail)",
    "kill_worker": "kill -9 of a DataLoader worker",
    "kill_ddp_rank": "kill -9 of a DDP local rank (shared=\"local\")",
    "full_disk": "a full disk (16 MiB tmpfs), then space back",
    "bad_input_python": "bad arguments to the public Python API (random entry point, "
                        "random bad value)",
    "bad_input_cli": "bad command lines",
}


def section_faults(data, path, machine_line):
    lines = ["## Fault campaign (issue 15)", "",
             "`bench/fault_campaign.py` (not part of the test command): each class tried "
             "with its own random seed; after every try the store is opened again (repaired "
             "first when the open says so) and every value it serves is compared with the "
             "source. *wrong*: values that differ; *acked lost*: Puts acknowledged with "
             "`sync=\"every\"` and not found after the kill; *failures*: an open or repair "
             "that fails, a verify that exits 0 while a stored record is no longer served, an "
             "exception that is not an `opt4store.Error`, a hang, a CLI that dies by a signal "
             "or says nothing. Run %s, seeds %s, %s s in all; %s." % (
                 data.get("date", "?"), data.get("seed"), data.get("seconds"),
                 machine_line(data, path)),
             "",
             "| class | tries | wrong | acked lost | failures | seconds | seed, finished |",
             "|---|---:|---:|---:|---:|---:|---|"]
    total = [0, 0, 0, 0]
    for name, rec in data["classes"].items():
        label = NAMES.get(name, name)
        if rec.get("skipped"):
            lines.append(f"| {label} | skipped: {rec['skipped']} | | | | | |")
            continue
        row = [rec["tries"], rec["wrong"], rec["acked_lost"], len(rec["failures"])]
        total = [a + b for a, b in zip(total, row)]
        lines.append("| %s | %d | %d | %d | %d | %s | %s, %s |" % (
            label, *row, rec["seconds"], rec.get("seed"), rec.get("date")))
    lines.append("| **all** | **%d** | **%d** | **%d** | **%d** | | |" % tuple(total))
    lines += ["", "A class is run again alone with `--only CLASS --merge`; the last column "
              "says which run each row comes from.", ""]
    failed = [(n, f) for n, r in data["classes"].items() for f in r["failures"]]
    if failed:
        lines += ["Failures:", ""]
        lines += [f"- {n}: {f[:300]}" for n, f in failed[:40]]
        lines.append("")
    lines += ["Source: `%s`." % os.path.relpath(path, os.path.dirname(os.path.dirname(path))), ""]
    return lines
