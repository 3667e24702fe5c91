"""to_device: the identity on the CPU; on CUDA, batches arrive on the GPU
with the same bytes (skipped without a GPU)."""

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import UniformDataset, VariableDataset, assert_same, keep_list

N = 64
BATCH = 8

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def make_loader(tmp_path, dataset, **loader_options):
    store = opt4store.Store(tmp_path / "store", ram_items=N, disk=0)
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(len(dataset)),
                                       generator=torch.Generator().manual_seed(1)), epochs=2)
    ds = opt4store.CachedDataset(dataset, store, sampler)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=BATCH, **loader_options)
    return store, sampler, loader


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_cpu_is_the_identity(tmp_path, device):
    store, sampler, loader = make_loader(tmp_path, UniformDataset(N))
    try:
        assert opt4store.to_device(loader, device) is loader
        assert opt4store.to_device(loader, device, non_blocking=False) is loader
        for b, batch in enumerate(opt4store.to_device(loader, device)):
            assert batch.device.type == "cpu"
            for j in range(BATCH):
                assert torch.equal(batch[j], UniformDataset(N)[sampler.plan[b * BATCH + j]])
    finally:
        store.close()


def test_device_loader_on_cpu_yields_the_batches():
    batches = [torch.arange(4), {"x": torch.ones(2)}]
    wrapped = opt4store.DeviceLoader(batches, "cpu")
    assert len(wrapped) == 2
    got = list(wrapped)
    assert got[0] is batches[0] and got[1] is batches[1]


@cuda
@pytest.mark.parametrize("pin_memory", [False, True])
def test_cuda_batches_have_the_same_bytes(tmp_path, pin_memory):
    store, sampler, loader = make_loader(tmp_path, UniformDataset(N), pin_memory=pin_memory)
    try:
        device_loader = opt4store.to_device(loader, "cuda")
        assert device_loader is not loader
        assert len(device_loader) == len(loader)
        for epoch in range(2):
            count = 0
            for b, batch in enumerate(device_loader):
                assert batch.is_cuda
                # Compute on the current stream, as a training step would.
                host = (batch * 1).cpu()
                for j in range(BATCH):
                    expected = UniformDataset(N)[sampler.plan[epoch * N + b * BATCH + j]]
                    assert torch.equal(host[j], expected)
                count += 1
            assert count == N // BATCH
    finally:
        store.close()


@cuda
def test_cuda_nested_batches(tmp_path):
    dataset = VariableDataset(N)
    store, sampler, loader = make_loader(tmp_path, dataset, collate_fn=keep_list)
    try:
        for b, batch in enumerate(opt4store.to_device(loader, torch.device("cuda", 0))):
            for j, item in enumerate(batch):
                expected = dataset[sampler.plan[b * BATCH + j]]

                def back(v):
                    if isinstance(v, torch.Tensor):
                        assert v.is_cuda
                        return v.cpu()
                    if isinstance(v, tuple):
                        return tuple(back(x) for x in v)
                    if isinstance(v, list):
                        return [back(x) for x in v]
                    if isinstance(v, dict):
                        return {k: back(x) for k, x in v.items()}
                    return v

                assert_same(back(item), expected)
    finally:
        store.close()
