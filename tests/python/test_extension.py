"""The built extension exports its init function and nothing else.

Anything more lets other libraries bind to copies inside it: under pip's
torch, RocksDB's calls into libstdc++ bound to the extension's copies of the
ostream inserters, and its stats thread crashed (bindings/CMakeLists.txt).
"""

import shutil
import subprocess

import torch
import torch.utils.data

import opt4store
from opt4store import _core


def exported_symbols(path):
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to read the extension's symbol table"
    out = subprocess.run([nm, "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def test_extension_exports_only_its_init_function():
    assert exported_symbols(_core.__file__) == ["PyInit__core"]


def test_extension_still_works_with_every_other_symbol_hidden(tmp_path):
    # Both tiers (RocksDB, io_uring, the shared RAM tier) through the extension.
    data = [torch.full((16,), i, dtype=torch.int32) for i in range(8)]
    store = opt4store.Store(tmp_path / "store", ram_items=2, disk="8MiB")
    sampler = opt4store.PlannedSampler(torch.utils.data.SequentialSampler(data), epochs=2)
    ds = opt4store.CachedDataset(data, store, sampler)
    try:
        for _ in range(2):
            for i in sampler:
                assert torch.equal(ds[i], data[int(i)])
        st = store.stats()
        assert st["disk_items"] == len(data), st
        assert st["source_loads"] == len(data), st
    finally:
        store.close()
