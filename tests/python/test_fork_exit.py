"""A child made with os.fork() while a store with a disk tier is open, that
leaves through a normal exit (sys.exit, the end of its code): it exits,
with its status and its buffered output. It hung in exit() for ever, in
the destructor of RocksDB's static timer, whose condition variable kept a
waiter from the parent (DataLoader workers leave by os._exit, and were not
affected)."""

import subprocess
import sys

from o4s_testlib import child_env

SCRIPT = r"""
import os, sys, time
import opt4store
store = opt4store.Store(sys.argv[1], ram_items=8, disk="16MiB")
store.bind(8)
store.put(0, 1, [1, 2, 3])
pid = os.fork()
if pid == 0:
    sys.stdout.write("child wrote this, unflushed\n")
    sys.exit(3)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child status", os.waitstatus_to_exitcode(status), flush=True)
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("child still running after 20 s", flush=True)
store.close()
"""


def test_a_forked_child_leaves_at_a_normal_exit(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "store")],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "child wrote this, unflushed" in lines, proc.stdout
    assert lines[-1] == "child status 3", proc.stdout
