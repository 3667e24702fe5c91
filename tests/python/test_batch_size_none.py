"""opt4store.DataLoader(batch_size=None), as torch's DataLoader: no
auto-collation. Each item is one sample, passed through default_convert (a
tensor without an added leading dimension), or given as it is to a
collate_fn; drop_last is refused; state_dict() resumes at an item.
"""

import pytest
import torch
import torch.utils.data

import opt4store
from o4s_testlib import MadeDataset, assert_same, uniform_item

N = 24

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def tensor_sample(i):
    return uniform_item(i, 12).view(3, 4)


def pair_sample(i):
    return (tensor_sample(i), int(i) % 5)


def dict_sample(i):
    return {"x": tensor_sample(i), "y": int(i) * 3, "name": "sample"}


SAMPLES = {"tensor": tensor_sample, "pair": pair_sample, "dict": dict_sample}


def cached(path, make, epochs=2):
    store = opt4store.Store(path, ram_items=N // 2, disk="16MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(7)),
        epochs=epochs)
    return store, sampler, opt4store.CachedDataset(MadeDataset(make, N), store, sampler)


def sample_and_label(sample):
    """A collate_fn that shows what it was given: the sample itself."""
    return ("given", sample)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sample", sorted(SAMPLES))
@pytest.mark.parametrize("collate_fn", [None, sample_and_label])
def test_items_as_torch_gives_them(tmp_path, sample, num_workers, collate_fn):
    kwargs = dict(batch_size=None, num_workers=num_workers, collate_fn=collate_fn)
    if num_workers:
        kwargs["multiprocessing_context"] = "fork"
    a_store, a_sampler, a_ds = cached(tmp_path / "a", SAMPLES[sample])
    b_store, b_sampler, b_ds = cached(tmp_path / "b", SAMPLES[sample])
    try:
        for epoch in range(2):
            theirs = list(torch.utils.data.DataLoader(a_ds, sampler=a_sampler, **kwargs))
            ours = opt4store.DataLoader(b_ds, sampler=b_sampler, **kwargs)
            assert len(ours) == len(theirs) == N
            got = list(ours)
            assert len(got) == N
            for k, (g, e) in enumerate(zip(got, theirs)):
                assert_same(g, e, f"epoch {epoch} item {k}")
            first = got[0][1] if collate_fn is not None else got[0]
            leaf = first if sample == "tensor" else first[0] if sample == "pair" else first["x"]
            assert leaf.shape == (3, 4)  # no leading dimension
    finally:
        a_store.close()
        b_store.close()


def test_drop_last_without_batches_is_refused(tmp_path):
    store, sampler, ds = cached(tmp_path / "s", tensor_sample)
    with pytest.raises(opt4store.InvalidArgumentError, match="drop_last"):
        opt4store.DataLoader(ds, sampler=sampler, batch_size=None, drop_last=True)
    with pytest.raises(ValueError):  # as torch's
        torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, drop_last=True)
    store.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_at_an_item(tmp_path, num_workers):
    kwargs = dict(batch_size=None, num_workers=num_workers)
    if num_workers:
        kwargs["multiprocessing_context"] = "fork"
    store, sampler, ds = cached(tmp_path / "ref", pair_sample)
    reference = [item for _ in range(2)
                 for item in opt4store.DataLoader(ds, sampler=sampler, batch_size=None)]
    store.close()
    for stop in (0, 5, N - 1, N + 7):
        path = tmp_path / f"run{stop}"
        store, sampler, ds = cached(path, pair_sample)
        loader = opt4store.DataLoader(ds, sampler=sampler, **kwargs)
        seen, state = 0, None
        for _ in range(2):
            for _item in loader:
                state = loader.state_dict()
                if seen == stop:
                    break
                seen += 1
            if seen == stop:
                break
        store.close()
        store, sampler, ds = cached(path, pair_sample)
        loader = opt4store.DataLoader(ds, sampler=sampler, **kwargs)
        loader.load_state_dict(state)
        rest = []
        while len(rest) < 2 * N - stop - 1:
            rest += list(loader)
        assert len(rest) == 2 * N - stop - 1
        for k, item in enumerate(rest):
            assert_same(item, reference[stop + 1 + k], f"resumed after {stop}: item {k}")
        store.close()
