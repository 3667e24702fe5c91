"""bench/disk_budget_bench.py, run short: under a disk budget of 40% of the
data, a run loads no more than OPT over the room the disk tier had allows
(with RAM under OPT before it), and far less than a disk filled once. Until
2026-11-29 the tier stored every Put and evicted by ranks that tied (draws
with replacement here: 866 loads against a bound of 768)."""

import json

from o4s_testlib import run_bench


def test_disk_budget_loads_no_more_than_the_opt_bound(tmp_path):
    out = tmp_path / "disk_budget.json"
    run_bench("disk_budget_bench.py", "--items", 500, "--json", out)
    runs = {r["sampler"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"shuffle", "replacement"}
    for r in runs.values():
        loads, bound, once = sum(r["loads"]), sum(r["bound"]), sum(r["fill_once"])
        assert loads <= bound <= once, r
        assert r["disk_evictions"] > 0 and r["disk_bypasses"] > 0, r
    r = runs["replacement"]
    assert sum(r["loads"]) < 0.9 * sum(r["fill_once"]), r
