"""sync="every" in a forked worker whose owner closes the store: the
worker's next Put raises a clear opt4store.Error (IOError_, naming the
owner's close) instead of returning, and every Put that returned before is
in the store when it is opened again. (tests/store_sync_test.cc covers an
owner that stops answering, past fetch_timeout_ms, in C++.)"""

import os

import torch

import opt4store
from opt4store import NO_POSITION

N = 100


def value(i):
    return torch.full((2048,), float(i))


def test_worker_put_after_the_owner_closed_raises_and_loses_nothing(store_path):
    store = opt4store.Store(store_path, ram_items=4, disk="16MiB", sync="every")
    store.bind(N)
    first = 10
    r, w = os.pipe()
    closed_r, closed_w = os.pipe()  # the parent says when the owner has closed
    pid = os.fork()
    if pid == 0:  # the worker: Puts until one is refused, then reports
        code = 1
        try:
            os.close(r)
            os.close(closed_w)
            acked, error = 0, None
            for i in range(N):
                try:
                    store.put(NO_POSITION, i, value(i))
                except BaseException as e:  # reported to the parent, judged there
                    error = e
                    break
                acked = i + 1
                if acked == first:
                    os.write(w, b"ready\n")
                    os.read(closed_r, 1)  # waits for the owner's close
            kind = type(error).__name__ if error is not None else "none"
            is_ours = isinstance(error, opt4store.Error)
            os.write(w, f"{acked}|{kind}|{is_ours}|{error}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    os.close(closed_r)
    with os.fdopen(r) as reports:
        assert reports.readline().strip() == "ready"
        store.close()
        os.write(closed_w, b"c")
        os.close(closed_w)
        acked, kind, is_ours, message = reports.readline().strip().split("|", 3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    acked = int(acked)
    assert acked == first, "a Put returned although the owner had closed"
    assert kind == "IOError_" and is_ours == "True", (kind, message)
    assert "owner closed" in message

    reopened = opt4store.Store(store_path, sync="every")
    reopened.bind(N)
    for i in range(acked):
        got = reopened.get(NO_POSITION, i)
        assert got is not None, f"acknowledged Put {i} is lost"
        assert torch.equal(got, value(i))
    reopened.close()
