"""bench/load_soak.py, run short: its runs complete, and each loads every
id it reads once (the disk tier holds everything). The soak itself, with
hundreds of runs and CPU hogs, is not part of the test command."""

import re

from o4s_testlib import run_bench


def test_load_soak_runs_and_finds_no_second_load():
    out = run_bench("load_soak.py", "--runs", 3, "--seed", 9)
    lines = out.strip().splitlines()
    assert len(lines) == 4, out
    for line in lines[:3]:
        m = re.search(r": extra (\d+), source loads (\d+), expect timeouts (\d+)$", line)
        assert m, line
        assert m.group(1) == "0" and int(m.group(2)) > 0 and m.group(3) == "0", line
    assert lines[3] == "0 of 3 runs loaded an id twice, timed out a wait or failed"
