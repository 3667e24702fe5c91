"""What a new user, or a lent GPU machine, runs first, run small here: the
README's quick start as it is written, bench/demo.py (what `./build.sh
demo` runs) and bench/gpu_bench.py's harness on the CPU (what
`bench/gpu_device.sh` runs on a GPU; a lease is short and comes rarely, so
a harness broken since the last one must fail here, not there). The demo
and the harness check every value against a fresh decode; these tests
check that, and that the counts say the cache did its work (every item
loaded once, then served from the store). No timing is asserted: the
figures are the benchmarks' business."""

import json
import os
import re

import torch
import torch.utils.data

from o4s_testlib import report_from, run_bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Filled(torch.utils.data.Dataset):
    """(a tensor filled with i, i): a batch says which items it holds."""

    def __len__(self):
        return 200

    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), i


def test_readme_quick_start_runs_as_written(tmp_path):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    code = re.search(r"## Quick start \(Python\)\n.*?```python\n(.*?)```", readme, re.S).group(1)
    assert '"/data/cache"' in code and "for batch in loader" in code
    scope = {"dataset": Filled()}
    exec(compile(code.replace('"/data/cache"', repr(str(tmp_path / "cache"))),
                 "README.md quick start", "exec"), scope)
    stats = scope["store"].stats()  # closed by the snippet: its last run's counters
    assert stats["last_run"]
    epochs = scope["sampler"].epochs
    assert stats["accesses"] == epochs * 200 and stats["source_loads"] == 200
    x, i = scope["batch"]  # the last batch the loop saw
    assert torch.equal(x, torch.stack([Filled()[k][0] for k in i.tolist()]))


def test_readme_imagefolder_snippet_runs_as_written(tmp_path):
    """The README's ImageFolder recipe, its sizes scaled to a folder of 12
    PNGs: each image decoded once, no RuntimeWarning from the store, batches
    of normalized 224 px crops with ImageFolder's labels."""
    import warnings

    import numpy as np
    import pytest
    from PIL import Image
    pytest.importorskip("torchvision", reason="torchvision is not installed")
    root = tmp_path / "train"
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for k in range(6):
            pixels = np.random.default_rng(k).integers(0, 256, (300, 320, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / c / f"{k}.png")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    code = re.search(r"With torchvision's ImageFolder, split.*?```python\n(.*?)```", readme,
                     re.S).group(1)
    for old, new in (('"/data/train"', repr(str(root))),
                     ('"/data/cache"', repr(str(tmp_path / "c"))),
                     ('ram="32GiB"', 'ram="2MiB"'), ('disk="200GiB"', 'disk="16MiB"'),
                     ("epochs=90", "epochs=3"), ("batch_size=256", "batch_size=4"),
                     ("num_workers=8", "num_workers=2")):
        assert old in code, old
        code = code.replace(old, new)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        scope = {}
        exec(compile(code, "README.md ImageFolder snippet", "exec"), scope)
    stats = scope["store"].stats()
    # Each epoch's first sample is read twice: by the loader, whose probe of
    # the transform's output shows the batch layout, and by its worker.
    assert stats["source_loads"] == 12 and stats["accesses"] == 3 * 12 + 3
    images, labels = scope["images"], scope["labels"]
    assert images.shape == (4, 3, 224, 224) and images.dtype == torch.float32
    assert set(labels.tolist()) <= {0, 1} and images.min() < -1 < 1 < images.max()


def test_demo_decodes_each_image_once_and_every_sample_is_right(tmp_path):
    images = 64
    out = run_bench("demo.py", "--images", images, "--workers", 2, "--dir", tmp_path,
                     "--json", tmp_path / "demo.json")
    result = json.loads((tmp_path / "demo.json").read_text())
    assert result["wrong"] == 0, out
    first, *later = result["per_epoch"]
    assert first["accesses"] == images and first["source_loads"] == images
    for epoch in later:  # the disk tier holds every item: nothing decoded again
        assert epoch["source_loads"] == 0, result["per_epoch"]
        assert epoch["hits_ram"] + epoch["hits_disk"] == images
    restart = result["restart"]["stats"]  # a new process on the same store
    assert restart["accesses"] == images and restart["source_loads"] == 0
    assert "0 wrong" in out


def check_gpu_bench_rows(block, epochs):
    """Every configuration ran, checked its items, found none wrong; the
    cached ones were measured against a floor taken just before each, and
    opt + disk decoded nothing after epoch 1."""
    rows = 0
    for model, by_workers in block["results"].items():
        assert block["floor"][model]["epoch_s"] > 0
        for workers, runs in by_workers.items():
            for name, run in runs.items():
                rows += 1
                assert run["wrong"] == 0 and run["checked"] > 0, (model, workers, name)
                assert len(run["epoch_times"]) == epochs
                assert all(0 <= w <= t for w, t in zip(run["wait_s"], run["epoch_times"])), run
                assert len(run["wait_s"]) == epochs
                if not name.startswith("no_cache"):
                    assert run["floor_s"] > 0, (model, workers, name)
                    assert run["epoch_vs_floor"] == [
                        t / run["floor_s"] for t in run["epoch_times"][1:]]
                if name.startswith("opt_disk_prefetch"):
                    assert [e["source_loads"] for e in run["per_epoch"][1:]] == \
                        [0] * (epochs - 1), (model, workers, name, run["per_epoch"])
    return rows


def check_gpu_bench_paired(block, rounds, transfers, images):
    """The paired part ran each worker count: every round ran one epoch per
    transfer, in the order rotated by the round, each right after a floor
    pass of its own; each epoch's ratios are to that pass and to the round's
    copy epoch, its median step's to the pass's; only the fill epoch loaded
    from the source, and no item came back wrong."""
    count = 0
    for model, by_workers in block["paired"].items():
        for workers, p in by_workers.items():
            count += 1
            assert p["wrong"] == 0 and p["checked"] > 0, (model, workers)
            assert p["source_loads"] == p["images"] == images, (model, workers, p["stats"])
            assert len(p["rounds"]) == rounds
            for k, r in enumerate(p["rounds"]):
                assert r["order"] == transfers[k % len(transfers):] + \
                    transfers[:k % len(transfers)]
                assert r["floor_s"] == r["floor_before_s"][r["order"][0]]
                assert all(r["floor_before_s"][t] > 0 and r["floor_step_ms"][t] > 0
                           and r["step_ms"][t] > 0 for t in transfers)
                assert all(0 <= r["wait_s"][t] <= r["epoch_s"][t] for t in transfers)
                assert all(r["sm_mhz"][t] == [None, None] for t in transfers)  # no GPU here
            for t in transfers:
                assert p["epoch_vs_floor"][t] == [r["epoch_s"][t] / r["floor_before_s"][t]
                                                  for r in p["rounds"]]
                assert p["step_vs_floor"][t] == [r["step_ms"][t] / r["floor_step_ms"][t]
                                                 for r in p["rounds"]]
                if "copy" in transfers and t != "copy":
                    assert p["vs_copy"][t] == [r["epoch_s"][t] / r["epoch_s"]["copy"]
                                               for r in p["rounds"]]
    return count


def test_gpu_bench_harness_runs_on_the_cpu(tmp_path):
    json_path = tmp_path / "standard.json"
    run_bench("gpu_bench.py", "--quick", "--device", "cpu", "--models", "tiny",
               "--workers", "0,2", "--images", 32, "--paired", 2, "--dir", tmp_path,
               "--json", json_path)
    result = json.loads(json_path.read_text())
    assert result["wrong"] == 0
    # 3 configurations x 3 transfers, less no_cache's loader, for each worker count
    assert check_gpu_bench_rows(result, 2) == 2 * 8
    assert result["ratios"]
    # with the native loader, the paired part adds its batches with no thread
    paired_transfers = ["copy", "to_device", "loader", "pinned", "inline", "thread"]
    assert check_gpu_bench_paired(result, 2, paired_transfers, 32) == 2
    # The heavy setting's source (1024 px JPEGs, PIL filters) in one row,
    # and --merge joins the two runs as the report reads them.
    heavy_path = tmp_path / "heavy.json"
    run_bench("gpu_bench.py", "--heavy", "--device", "cpu", "--models", "tiny",
               "--workers", 0, "--images", 8, "--epochs", 2, "--configs", "opt_disk_prefetch",
               "--transfers", "loader", "--dir", tmp_path, "--json", heavy_path)
    merged_path = tmp_path / "merged.json"
    run_bench("gpu_bench.py", "--merge", json_path, heavy_path, "--json", merged_path,
               "--note", "test")
    merged = json.loads(merged_path.read_text())
    assert merged["wrong"] == 0
    assert check_gpu_bench_rows(merged, 2) == 2 * 8
    assert check_gpu_bench_rows(merged["heavy"], 2) == 1
    assert check_gpu_bench_paired(merged, 2, paired_transfers, 32) == 2
    assert check_gpu_bench_paired(merged["heavy"], 3, paired_transfers[2:], 8) == 1  # 3: default
    # The report's GPU section from the merged file: the paired table and
    # the goals it judges (a CPU run is labelled as such, not judged).
    report = report_from(tmp_path, "gpu_bench.json", merged_path.read_text())
    assert "Paired part: one opt + disk + prefetch store" in report
    assert "| tiny | 2 | to_device |" in report and "| tiny | 2 | inline |" in report
    assert "| tiny | 2 | thread |" in report
    assert "| median step vs floor's | SM MHz |" in report and " ?/? " in report
    assert "Source loads in all (each image once in the fill epoch, none after): " \
        "tiny/0 32 of 32, tiny/2 32 of 32; wrong samples: 0." in report
    assert "CPU harness check, not GPU results" in report
