"""opt4store.DataLoader's read-ahead: while the training loop holds batch k,
the store's hits for batch k + 1 are copied into that batch's tensors on a
thread of their own (Store.read_into's C++ job, which touches no Python
object and so needs no GIL), so the copy runs during the loop's step, as
torch's workers prepare batches ahead.

A fork while the thread is inside the store could leave the child with a
lock held, so reads ahead run only in an epoch that starts no worker
process, and any other fork of the process (a validation loader's workers
started inside the training loop) first waits for the read in flight
(os.register_at_fork). The read of a batch is joined before the batch is
handed out, and at the epoch's end whether the loop finished, broke off or
raised; a batch's tensors are its own (taken in the loop's thread) until
then. Store.close() waits for a read in flight too (a loop may close the
store while it holds the loader's iterator).
"""

import os
import weakref

_live = weakref.WeakSet()  # the ReadAheads of this process


def _wait_for_all():
    for ahead in list(_live):
        ahead.wait()


os.register_at_fork(before=_wait_for_all)


class ReadAhead:
    """One read in flight, for one batch number at a time."""

    def __init__(self, store):
        self._number, self._job, self._value = None, None, None
        store.close_after(self)
        _live.add(self)

    def start(self, number, value, read_async, *args):
        """Starts read_async(*args) (Store.batch_reader_async) for batch
        `number`; `value` (the tensors it reads into) comes back with its
        codes."""
        self._number, self._value = number, value
        self._job = read_async(*args)

    def take(self, number):
        """(value, codes) for batch `number`, or None when no read was
        started for it; the read's error is raised here."""
        if self._number != number:
            return None
        job, value = self._job, self._value
        self._number, self._job, self._value = None, None, None
        return value, job.wait()

    def wait(self):
        """Returns once no read is in flight (Store.close_after)."""
        job = self._job
        if job is not None:
            try:
                job.wait()
            except Exception:  # raised again by take()
                pass

    close = wait
