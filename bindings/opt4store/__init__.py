"""opt4store: a persistent two-tier (RAM + disk) cache for decoded training
samples, evicting with Belady's OPT along the sampler's known order.

Quick start::

    import opt4store, torch
    store = opt4store.Store("/data/cache", ram="2GiB", disk="20GiB")
    sampler = opt4store.PlannedSampler(torch.utils.data.RandomSampler(ds), epochs=5)
    loader = opt4store.DataLoader(opt4store.CachedDataset(ds, store, sampler),
                                  sampler=sampler, batch_size=64, num_workers=4)
    for epoch in range(5):
        for batch in loader:
            ...
    print(store.stats())
    store.close()
"""

import torch  # noqa: F401  (loads libtorch before the extension needs it)

from . import _fork  # noqa: F401  (forked children never collect the parent's CUDA objects)
from ._errors import (BusyError, CorruptionError, Error, InvalidArgumentError, InvalidTypeError,
                      IOError_, NoSpaceError, NotFoundError, OutOfRangeError, StaleStoreError)
from ._sizes import parse_size
from .dataset import CachedDataset
from .device import DeviceLoader, to_device
from .loader import DataLoader
from .sampler import PlannedIndex, PlannedSampler
from .store import NO_POSITION, Store

__all__ = [
    "Store", "PlannedSampler", "PlannedIndex", "CachedDataset", "DataLoader", "to_device",
    "DeviceLoader",
    "Error", "InvalidArgumentError", "InvalidTypeError", "BusyError", "NoSpaceError",
    "CorruptionError", "NotFoundError", "OutOfRangeError", "IOError_", "StaleStoreError",
    "parse_size",
    "NO_POSITION",
]
__version__ = "0.1.0"
