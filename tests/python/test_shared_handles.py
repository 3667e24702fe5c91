"""How a host's ranks find a shared store's owner without a process group
(the handle file in /dev/shm): a record of another run's store under the
same shared_name is refused, not attached to; an owner killed but not yet
reaped (a zombie) is dead, as the engine has it; LOCAL_RANK without
LOCAL_WORLD_SIZE (or the other way) is an error, not a store per rank."""

import json
import os
import time

import pytest

import opt4store
from opt4store import distributed


@pytest.fixture
def sharing(tmp_path):
    reader = distributed.LocalSharing(str(tmp_path / "mine"), local_rank=1, local_world_size=2,
                                      name=f"test-handles-{os.getpid()}", timeout=2.0)
    reader.layout()
    yield reader
    if os.path.exists(reader.handle_file()):
        os.remove(reader.handle_file())


def test_a_record_of_another_runs_store_is_refused(tmp_path, sharing):
    theirs = os.path.realpath(tmp_path / "theirs")
    record = {"pid": os.getpid(), "started": distributed.start_ticks(os.getpid()),
              "path": theirs, "handle": "/opt4store-ctl.0.0", "error": None}
    with open(sharing.handle_file(), "w") as f:
        json.dump(record, f)
    started = time.monotonic()
    with pytest.raises(opt4store.BusyError, match="another run uses the same shared_name") as e:
        sharing._wait_for_file()
    assert theirs in str(e.value) and time.monotonic() - started < 1.0  # at once, no wait


def test_an_owner_killed_but_not_reaped_is_dead():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 5
        while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not distributed.pid_alive(pid)
        assert distributed.pid_alive(os.getpid(), distributed.start_ticks(os.getpid()))
    finally:
        os.waitpid(pid, 0)


@pytest.mark.parametrize("given, missing", [("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                                            ("LOCAL_WORLD_SIZE", "LOCAL_RANK")])
def test_half_of_the_local_layout_in_the_environment_is_an_error(monkeypatch, given, missing):
    monkeypatch.delenv(missing, raising=False)
    monkeypatch.setenv(given, "1" if given == "LOCAL_RANK" else "2")
    with pytest.raises(opt4store.InvalidArgumentError, match=f"{given} is set and {missing}"):
        distributed.resolve_layout()


def test_a_job_of_several_ranks_without_a_local_layout_is_an_error(monkeypatch):
    """RANK and WORLD_SIZE set, as a hand-made launch sets them, neither
    LOCAL_* variable, and the store bound before init_process_group: each
    rank took itself for a host of one (the second met the first's LOCK, a
    BusyError naming its sibling; without a disk tier both ran unshared)."""
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(opt4store.InvalidArgumentError, match="WORLD_SIZE=2, but neither"):
        distributed.resolve_layout()
    monkeypatch.setenv("WORLD_SIZE", "1")  # a job of one rank is a host of one
    assert distributed.resolve_layout() == (0, 1)
