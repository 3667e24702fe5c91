"""bench/launch_bench.py, run small: the harness behind bench/REPORT.md's
section on loading beside a launch-bound step. Every loader, inline and on
to_device's background thread and paced, must deliver every batch of every epoch,
every read after the first epoch must be a hit, the report must show
each run. No timing is asserted: the figures are the benchmark's business."""

import json

from o4s_testlib import report_from, run_bench

ROUNDS = 2
STEPS = 400 // 16  # the bench's items over its batch


def test_launch_bench_runs_every_loader_inline_on_a_thread_and_paced(tmp_path):
    out = tmp_path / "launch.json"
    run_bench("launch_bench.py", "--rounds", ROUNDS, "--step-ms", 1, "--wait-ms", "0,1",
              "--json", out)
    result = json.loads(out.read_text())
    assert result["source_loads"] == 400  # the first epoch only: every later read hit
    assert list(result["runs"]) == ["0", "1"]
    keys = [f"{loader}/{place}" for loader in ("torch", "native", "decoding")
            for place in ("inline", "thread", "paced")]
    for run in result["runs"].values():
        assert list(run["epoch_vs_floor"]) == keys
        assert run["batches"] == dict.fromkeys(keys, ROUNDS * STEPS)
        for key in keys:
            assert len(run["epoch_vs_floor"][key]) == ROUNDS
            assert all(v > 0 for v in run["epoch_vs_floor"][key])
            assert all(w >= 0 for w in run["wait_s"][key])
        assert all(len(v) == ROUNDS for v in run["loader_alone_s"].values())
        # The native loader's hits cost 0.6-0.9 ms a batch here, torch's about 1 ms,
        # as much as these steps and near the rule's 1 ms floor: the rule may move
        # either (asserting none for the native loader failed beside the test
        # command's own builds, 2026-11-29: 4 and 5 of 50, the day before's code
        # too). Where they went is the benchmark's business.
        # The decoding loader's batches cost 16 x 1 ms: on the thread, but for each
        # epoch's first batch (staged before the thread starts) and the first epoch's
        # first two (timed before the first choice).
        for loader in ("native", "torch"):
            assert 0 <= run["on_thread"][f"{loader}/paced"] <= ROUNDS * STEPS
        assert run["on_thread"]["decoding/paced"] >= ROUNDS * (STEPS - 1) - 3

    report = report_from(tmp_path, "launch.json", out.read_text())
    assert "## Loading beside a launch-bound step (CPU stand-in)" in report
    assert "| 1 | native | thread |" in report and "| 0 | torch | inline |" in report
    assert "| 0 | native | paced |" in report
