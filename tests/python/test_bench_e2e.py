"""bench/e2e_bench.py, run small: the harness behind bench/REPORT.md's
end-to-end figures. Its paired rounds must hold the runs they claim, in
the rotated order, and the goals they judge must be judged from them; the
report must show them. No timing is asserted: the figures are the
benchmark's business."""

import json
import statistics

from o4s_testlib import report_from, run_bench

ROUNDS = 3
PAIRED = ["no_cache", "opt_disk_prefetch", "all_in_ram"]


def later(times):
    return sum(times[1:])


def test_e2e_bench_pairs_its_rounds_and_judges_the_goals_by_them(tmp_path):
    out = tmp_path / "e2e.json"
    run_bench("e2e_bench.py", "--quick", "--images", 48, "--paired", ROUNDS,
              "--dir", tmp_path / "work", "--json", out)
    result = json.loads(out.read_text())
    assert result["wrong"] == 0
    epochs = result["settings"]["epochs"]
    assert result["settings"]["paired_rounds"] == ROUNDS
    rounds = result["paired"]["0"]
    assert len(rounds) == ROUNDS
    for r, p in enumerate(rounds):
        assert p["order"] == PAIRED[r:] + PAIRED[:r]
        times = p["epoch_times"]
        assert len(times["no_cache"]) == 1
        assert len(times["opt_disk_prefetch"]) == len(times["all_in_ram"]) == epochs
        assert p["later_vs_all_in_ram"] == later(times["opt_disk_prefetch"]) / \
            later(times["all_in_ram"])
        assert p["epoch1_vs_no_cache"] == times["opt_disk_prefetch"][0] / times["no_cache"][0]
    goals = result["goals"]["0"]
    for goal, key in (("later_epochs_within_20pct_of_all_in_ram", "later_vs_all_in_ram"),
                      ("epoch1_at_most_15pct_slower", "epoch1_vs_no_cache")):
        g = goals[goal]
        values = [p[key] for p in rounds]
        assert g["paired"] == {"median": statistics.median(values), "min": min(values),
                               "max": max(values), "rounds": ROUNDS}
        target = float(g["target"].split()[1])
        assert g["met"] == (g["paired"]["median"] <= target)
    # The goals that compare with no cache's whole run stay whole-run ratios.
    runs = result["configs"]
    g = goals["later_epochs_4x_vs_no_cache"]
    assert "paired" not in g
    assert g["ratio"] == later(runs["no_cache"]["workers"]["0"]["epoch_times"]) / \
        later(runs["opt_disk_prefetch"]["workers"]["0"]["epoch_times"])

    report = report_from(tmp_path, "e2e.json", out.read_text())
    assert "Paired rounds (part 1b)" in report
    for r in range(ROUNDS):
        assert "| 0 | %d | %s |" % (r + 1, ", ".join(PAIRED[r:] + PAIRED[:r])) in report
    row = next(line for line in report.splitlines()
               if line.startswith("| epochs 2-5 within 20% of an all-in-RAM run | 0 |"))
    assert row.endswith(" of %d | <= 1.2 | %s |" % (
        ROUNDS, "met" if goals["later_epochs_within_20pct_of_all_in_ram"]["met"] else
        "**MISSED**"))
