"""A forked child of a process that has used CUDA does not collect the
parent's cyclic garbage (opt4store/_fork.py); one that has not, does."""

import gc
import os
import signal

import pytest
import torch

import opt4store  # noqa: F401  (registers the fork hooks)


class _Canary:
    """Cyclic garbage whose finalizer writes a byte to a pipe."""

    def __init__(self, fd):
        self.fd = fd
        self.me = self  # the cycle: only the collector frees it

    def __del__(self):
        os.write(self.fd, b"x")


def _collected_in_child(monkeypatch, cuda_initialized):
    """Leaves a canary unreachable, forks, runs gc.collect() in the child:
    whether the child freed it (the parent's collector is held off meanwhile)."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda_initialized)
    read_end, write_end = os.pipe()
    gc.collect()
    gc.disable()
    try:
        _Canary(write_end)
        pid = os.fork()
        if pid == 0:
            try:
                gc.enable()
                gc.collect()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        os.set_blocking(read_end, False)
        try:
            freed_in_child = os.read(read_end, 16) == b"x"
        except BlockingIOError:
            freed_in_child = False
    finally:
        gc.enable()
        gc.collect()  # the parent frees its canary now
        os.close(read_end)
        os.close(write_end)
    return freed_in_child


def test_a_child_of_a_cuda_process_leaves_inherited_garbage_alone(monkeypatch):
    assert not _collected_in_child(monkeypatch, cuda_initialized=True)


def test_a_child_of_a_process_without_cuda_collects_as_usual(monkeypatch):
    assert _collected_in_child(monkeypatch, cuda_initialized=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_forked_child_survives_collecting_after_to_device():
    """The crash this guards against: batches from to_device (they recorded
    the caller's stream) and the loader's pinned ring left in a cycle, then a
    child that collects."""
    loader = opt4store.to_device([torch.arange(1 << 16).view(16, -1)] * 4, "cuda")
    holder = {"batches": [b for b in loader], "loader": loader}
    holder["me"] = holder
    del holder, loader
    torch.cuda.synchronize()
    pid = os.fork()
    if pid == 0:
        try:
            gc.collect()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert not os.WIFSIGNALED(status), f"the child died of {signal.Signals(os.WTERMSIG(status)).name}"
    assert os.WEXITSTATUS(status) == 0
    gc.collect()
