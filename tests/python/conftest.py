"""pytest setup for opt4store's Python tests.

The package under test is the one CMake builds into <build>/python
(build.sh puts it on PYTHONPATH and sets OPT4STORE_BUILD_DIR). When only
OPT4STORE_BUILD_DIR is set, its python/ directory is added here.
"""

import faulthandler
import os
import shutil
import signal
import sys
import sysconfig
import threading

_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)  # o4s_testlib, for tests and spawned workers

_build = os.environ.get("OPT4STORE_BUILD_DIR")
if _build:
    _pkg = os.path.join(_build, "python")
    if os.path.isdir(os.path.join(_pkg, "opt4store")) and _pkg not in sys.path:
        sys.path.insert(0, _pkg)
        # Spawned workers and child interpreters find it the same way.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (_pkg, os.environ.get("PYTHONPATH")) if p)

import pytest  # noqa: E402

from o4s_testlib import CallCounter  # noqa: E402


@pytest.fixture
def store_path(tmp_path):
    """A directory for a store (not created: the store creates it)."""
    return tmp_path / "store"


@pytest.fixture
def counter(tmp_path):
    """Counts source calls across processes."""
    return CallCounter(tmp_path / "source_calls")


@pytest.fixture
def opt4store_cli():
    """The opt4store CLI: the build's (OPT4STORE_BUILD_DIR), or the one pip
    installed beside this interpreter, or the PATH's."""
    build = os.environ.get("OPT4STORE_BUILD_DIR")
    candidates = [os.path.join(build, "tools", "opt4store")] if build else []
    candidates.append(os.path.join(sysconfig.get_path("scripts"), "opt4store"))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("opt4store")
    if found is None:
        pytest.fail("the opt4store CLI is not built or installed (set OPT4STORE_BUILD_DIR)")
    return found


# A test that hangs ends the run after TEST_LIMIT_S, with every thread's
# traceback on stderr, instead of holding CI to its limit. Its descendants
# (DataLoader workers, spawned hosts) are killed first: one left holding the
# output pipe would keep the run from ending. A thread, not faulthandler's
# own timer, because the kill needs Python; a wait in C releases the GIL.
TEST_LIMIT_S = float(os.environ.get("OPT4STORE_TEST_LIMIT_S", "600"))


def _descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _end_hung_run(name, capture):
    if capture is not None:
        capture.suspend_global_capture(in_=True)  # so that the traceback shows
    sys.stderr.write(f"\n{name} ran past {TEST_LIMIT_S:.0f} s "
                     "(OPT4STORE_TEST_LIMIT_S): ending the run\n")
    faulthandler.dump_traceback(all_threads=True)
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


@pytest.fixture(autouse=True)
def _hang_guard(request):
    capture = request.config.pluginmanager.getplugin("capturemanager")
    timer = threading.Timer(TEST_LIMIT_S, _end_hung_run, args=(request.node.nodeid, capture))
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
