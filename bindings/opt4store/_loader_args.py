"""The checks of opt4store.DataLoader's arguments, torch's keywords with
torch's meaning and exclusions, and the sampler they choose."""

import torch
import torch.utils.data

from ._checks import (MAX_UINT64, check_bool, check_callable, check_int,
                      check_multiprocessing_context, check_number, check_str)
from ._errors import InvalidArgumentError, InvalidTypeError
from .dataset import CachedDataset

# The largest batch_size and num_workers: a batch over the largest dataset
# (2**32 - 1 items), or more workers than a host runs, is a mistake.
MAX_BATCH_SIZE = (1 << 32) - 1
MAX_WORKERS = 1 << 16


def checked_arguments(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
                      collate_fn, pin_memory, drop_last, timeout, worker_init_fn,
                      multiprocessing_context, generator, prefetch_factor, persistent_workers,
                      pin_memory_device):
    """The DataLoader's arguments, checked as torch's DataLoader checks
    them (InvalidTypeError, InvalidArgumentError naming the argument), and
    the sampler they make when none is given: (batch_size, shuffle,
    sampler, num_workers, timeout, prefetch_factor, pin_memory, drop_last,
    persistent_workers, multiprocessing_context)."""
    if not isinstance(dataset, CachedDataset):
        raise InvalidArgumentError(
            "opt4store.DataLoader loads an opt4store.CachedDataset; got "
            f"{type(dataset).__name__} (wrap it: CachedDataset(dataset, store, sampler))")
    batch_size = check_int("batch_size", batch_size, 1, MAX_BATCH_SIZE, allow_none=True)
    if shuffle is not None:
        shuffle = check_bool("shuffle", shuffle)
    num_workers = check_int("num_workers", num_workers, 0, MAX_WORKERS)
    timeout = check_number("timeout", timeout, 0.0)
    prefetch_factor = check_int("prefetch_factor", prefetch_factor, 1, MAX_UINT64,
                                allow_none=True)
    pin_memory = check_bool("pin_memory", pin_memory)
    drop_last = check_bool("drop_last", drop_last)
    persistent_workers = check_bool("persistent_workers", persistent_workers)
    check_str("pin_memory_device", pin_memory_device, allow_empty=True)
    check_callable("collate_fn", collate_fn)
    check_callable("worker_init_fn", worker_init_fn)
    multiprocessing_context = check_multiprocessing_context(
        "multiprocessing_context", multiprocessing_context, num_workers)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise InvalidTypeError(f"generator: expected a torch.Generator or None, got "
                               f"{type(generator).__name__}")
    if sampler is not None and not hasattr(sampler, "__iter__"):
        raise InvalidTypeError(f"sampler: expected an iterable of indices, got "
                               f"{type(sampler).__name__}")
    if batch_sampler is not None and not hasattr(batch_sampler, "__iter__"):
        raise InvalidTypeError(f"batch_sampler: expected an iterable of index lists, got "
                               f"{type(batch_sampler).__name__}")
    if num_workers == 0 and prefetch_factor is not None:
        raise InvalidArgumentError("prefetch_factor is for num_workers > 0")
    if num_workers == 0 and persistent_workers:
        raise InvalidArgumentError("persistent_workers needs num_workers > 0")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or
                                      drop_last):
        raise InvalidArgumentError(
            "batch_sampler is mutually exclusive with batch_size, shuffle, sampler and "
            "drop_last")
    if batch_size is None and drop_last:
        raise InvalidArgumentError("batch_size=None (no auto-collation) is mutually "
                                   "exclusive with drop_last")
    if sampler is not None and shuffle:
        raise InvalidArgumentError("sampler is mutually exclusive with shuffle")
    if sampler is None and batch_sampler is None:
        if shuffle:
            if dataset.sampler is not None:
                raise InvalidArgumentError(
                    "shuffle=True with a CachedDataset that has a PlannedSampler: give "
                    "that sampler (sampler=) so that the store follows the order read")
            sampler = torch.utils.data.RandomSampler(dataset, generator=generator)
        else:
            sampler = dataset.sampler if dataset.sampler is not None else \
                torch.utils.data.SequentialSampler(dataset)
    return (batch_size, shuffle, sampler, num_workers, timeout, prefetch_factor, pin_memory,
            drop_last, persistent_workers, multiprocessing_context)
