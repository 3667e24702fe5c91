"""Forked children of a process that has used CUDA never collect the parent's garbage.

A DataLoader's fork workers inherit the parent's heap, garbage included. When
the child's cyclic garbage collector frees a CUDA object of the parent's (a
device tensor that recorded a stream, a pinned buffer, an event), torch calls
into CUDA from a process where CUDA cannot work, and the error, raised in a
destructor, aborts the worker ("Fatal Python error: Aborted ... Garbage-
collecting"; seen on pip's torch 2.11 with a forked worker started after
opt4store.to_device had run). So, when CUDA was initialized in the parent at
the fork, the child freezes every inherited object out of the collector's
reach (gc.freeze): what the parent left unreachable stays unfreed in the
child, as it would be after exec, and the child's own garbage is collected as
usual. Objects whose reference count the child drops to zero are still freed;
only the cycle collector's sweep of inherited objects is stopped. Registered
once, when opt4store is imported.
"""

import gc
import os

import torch

_cuda_at_fork = False


def _before_fork():
    global _cuda_at_fork
    # Read in the parent: in the child torch already reports CUDA as unusable.
    _cuda_at_fork = torch.cuda.is_initialized()


def _after_fork_in_child():
    if _cuda_at_fork:
        gc.freeze()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
