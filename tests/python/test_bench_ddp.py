"""bench/ddp_bench.py, run small: the harness behind bench/REPORT.md's DDP
figures. Its ranks must read what DDP reads (drop_last's tails left out
of the batches), the shared store must decode each sample once on the host
(tails and restart included) while a store per rank decodes more, and the
report must show the runs. No timing is asserted: the figures are the
benchmark's business."""

import json

from o4s_testlib import report_from, run_bench

IMAGES = 52  # 26 a rank: 3 batches of 8 and a tail of 2 that drop_last leaves
BATCH = 8
EPOCHS = 3


def test_ddp_bench_loads_each_sample_once_with_the_shared_store(tmp_path):
    out = tmp_path / "ddp.json"
    # Ranks forked (a fresh interpreter each costs some 2.5 CPU-s here; the
    # bench's own runs, and the test below, start them as torchrun does).
    run_bench("ddp_bench.py", "--images", IMAGES, "--batch", BATCH, "--workers", 1,
              "--start", "fork",
              "--configs", "no_cache,per_rank,opt4store,opt4store_persistent,opt4store_batch_aug",
              "--dir", tmp_path / "work",
              "--json", out)
    result = json.loads(out.read_text())
    assert result["wrong"] == 0
    runs = result["configs"]
    assert list(runs) == ["no_cache", "per_rank", "opt4store", "opt4store_persistent",
                          "opt4store_batch_aug"]
    for name, r in runs.items():
        assert r["wrong"] == 0 and r["checked"] > 0, name
        assert len(r["epoch_times"]) == EPOCHS and r["floor"] > 0, name
    read = IMAGES // 2 // BATCH * BATCH * 2  # the host's samples an epoch, with drop_last
    assert runs["no_cache"]["source_loads"] == EPOCHS * read
    assert runs["no_cache"]["restart_source_loads"] == read
    for name in ("opt4store", "opt4store_persistent", "opt4store_batch_aug"):
        # its stats (expect_timeouts, drift, hits per rank) say why, if not
        assert runs[name]["source_loads"] == IMAGES, (name, runs[name]["stats"])
        assert runs[name]["restart_source_loads"] == 0, name
    ours = runs["opt4store"]
    per_rank = runs["per_rank"]
    assert per_rank["source_loads"] + per_rank["restart_source_loads"] > IMAGES
    goals = result["goals"]
    assert goals["loads_once"] == {"ratio": 1.0, "target": "= 1.0", "met": True}
    later = sum(runs["no_cache"]["epoch_times"][1:]) / sum(ours["epoch_times"][1:])
    assert goals["cached_epochs_4x"]["ratio"] == later
    assert goals["cached_epochs_4x"]["met"] == (later >= 4.0)

    report = report_from(tmp_path, "ddp.json", out.read_text())
    assert "## DDP on one host" in report
    row = next(line for line in report.splitlines() if line.startswith("| opt4store |"))
    assert row.endswith("| %d + 0 (1.00 N) | 0 of %d |" % (IMAGES, ours["checked"]))


def test_ddp_bench_starts_its_ranks_as_fresh_interpreters(tmp_path):
    out = tmp_path / "ddp.json"
    run_bench("ddp_bench.py", "--images", IMAGES, "--batch", BATCH, "--workers", 1,
              "--configs", "opt4store", "--dir", tmp_path / "work", "--json", out)
    result = json.loads(out.read_text())
    ours = result["configs"]["opt4store"]
    assert result["wrong"] == 0 and ours["checked"] > 0
    assert ours["source_loads"] == IMAGES and ours["restart_source_loads"] == 0
