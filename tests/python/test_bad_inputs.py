"""Bad arguments from Python (issue 15, point 5): a table of wrong types,
negatives, huge ints, floats and bools where ints belong, NaN, empty
strings, None where a value is required, files where a directory belongs
and unknown keywords, for every public entry point. Each must raise an
opt4store.Error subclass naming the argument (TypeError for an unknown
keyword, as Python does), never a TypeError, RuntimeError, OverflowError or
pickling error from the binding; and a bad call loses nothing: the store
still works afterwards."""

import math

import pytest
import torch

import opt4store
from opt4store import distributed
from o4s_testlib import UniformDataset, uniform_item

N = 10
BIG = 2 ** 64
NAN = math.nan
META16 = opt4store._core.encode_header("bytes", [16], 0, b"")  # a 16-byte payload

E = opt4store.InvalidArgumentError
T = opt4store.InvalidTypeError
R = opt4store.OutOfRangeError


class Context:
    """What a case may use: paths, and an open store bound to N items."""

    def __init__(self, tmp_path):
        self.path = tmp_path / "store"
        self.file = tmp_path / "a_file"
        self.file.write_bytes(b"not a directory")
        self._store = None
        self._ds = None

    @property
    def store(self):
        if self._store is None:
            self._store = opt4store.Store(self.path, ram_items=N, disk="16MiB")
            self._ds = opt4store.CachedDataset(UniformDataset(N), self._store, spot_check=0)
        return self._store

    @property
    def ds(self):
        self.store  # noqa: B018  (opens it)
        return self._ds

    def close(self):
        if self._store is not None:
            self._store.close()


def store(**kw):
    return lambda c: opt4store.Store(c.path, **kw)


def dataset(**kw):
    def call(c):
        args = {"dataset": UniformDataset(N), "store": opt4store.Store(None, ram_items=N)}
        args.update(kw)
        return opt4store.CachedDataset(**args)
    return call


def loader(**kw):
    return lambda c: opt4store.DataLoader(c.ds, **kw)


def planned(**kw):
    args = {"sampler": torch.utils.data.SequentialSampler(range(N)), "epochs": 2}
    args.update(kw)
    return opt4store.PlannedSampler(**args)


def on_sampler(method, *args):
    return lambda c: getattr(planned(), method)(*args)


def resumed(**state):
    def call(c):
        sampler = planned()
        sampler.load_state_dict(dict(sampler.state_dict(consumed=0), **state))
    return call


# (case id, call, exception class, word the message names)
CASES = [
    # ---- Store(path, ...)
    ("path-int", lambda c: opt4store.Store(5, disk="1MiB"), T, "path"),
    ("path-bytes", lambda c: opt4store.Store(b"/tmp/x", disk="1MiB"), T, "path"),
    ("path-empty", lambda c: opt4store.Store("", disk="1MiB"), E, "path"),
    ("path-file", lambda c: opt4store.Store(c.file, disk="1MiB"), E, "path"),
    ("path-nul", lambda c: opt4store.Store("a\0b", disk="1MiB"), E, "path"),
    ("ram-negative", store(ram=-1), E, "ram"),
    ("ram-huge", store(ram=BIG), E, "ram"),
    ("ram-float", store(ram=1.5), E, "ram"),
    ("ram-nan", store(ram=NAN), E, "ram"),
    ("ram-bool", store(ram=True), E, "ram"),
    ("ram-text", store(ram="lots"), E, "ram"),
    ("ram-empty", store(ram=""), E, "ram"),
    ("ram-over-2^56", store(ram=2 ** 60, disk="1MiB"), E, "ram"),
    ("ram-and-ram_items", store(ram="1MiB", ram_items=4), E, "ram"),
    ("disk-negative", store(disk=-5), E, "disk"),
    ("disk-list", store(disk=[1]), E, "disk"),
    ("ram_items-negative", store(ram_items=-1), E, "ram_items"),
    ("ram_items-float", store(ram_items=1.0), T, "ram_items"),
    ("ram_items-bool", store(ram_items=True), T, "ram_items"),
    ("ram_items-huge", store(ram_items=BIG), E, "ram_items"),
    ("ram_items-str", store(ram_items="4"), T, "ram_items"),
    ("prefetch_depth-negative", store(prefetch_depth=-1), E, "prefetch_depth"),
    ("prefetch_depth-float", store(prefetch_depth=2.5), T, "prefetch_depth"),
    ("prefetch_depth-huge", store(prefetch_depth=BIG), E, "prefetch_depth"),
    ("prefetch_depth-over-limit",  # checked by the engine as the store opens
     lambda c: opt4store.CachedDataset(UniformDataset(N), opt4store.Store(
         c.path, ram_items=N, disk="1MiB", prefetch_depth=2 ** 40)), E, "prefetch_depth"),
    ("staging-negative", store(staging=-1), E, "staging"),
    ("policy-int", store(policy=5), T, "policy"),
    ("policy-empty", store(policy=""), E, "policy"),
    ("policy-unknown", store(policy="belady"), E, "policy"),
    ("compression-int", store(compression=1), T, "compression"),
    ("sync-unknown", store(sync="sometimes"), E, "sync"),
    ("fingerprint-int", store(fingerprint=5), T, "fingerprint"),
    ("fingerprint-empty", store(fingerprint=""), E, "fingerprint"),
    ("reset-int", store(reset=1), T, "reset"),
    ("reset-none", store(reset=None), T, "reset"),
    ("fetch_timeout_ms-negative", store(fetch_timeout_ms=-5), E, "fetch_timeout_ms"),
    ("fetch_timeout_ms-float", store(fetch_timeout_ms=1.5), T, "fetch_timeout_ms"),
    ("fetch_timeout_ms-huge", store(fetch_timeout_ms=BIG), E, "fetch_timeout_ms"),
    ("fetch_timeout_ms-bool", store(fetch_timeout_ms=True), T, "fetch_timeout_ms"),
    ("shared-unknown", store(shared="global"), E, "shared"),
    ("local_rank-negative", store(shared="local", local_rank=-1, local_world_size=2), E,
     "local_rank"),
    ("local_world_size-zero", store(shared="local", local_rank=0, local_world_size=0), E,
     "local_world_size"),
    ("shared_name-empty", store(shared="local", shared_name=""), E, "shared_name"),
    ("shared_name-slash", store(shared="local", shared_name="a/b"), E, "shared_name"),
    ("shared_timeout-nan", store(shared="local", shared_timeout=NAN), E, "shared_timeout"),
    ("shared_timeout-negative", store(shared="local", shared_timeout=-1), E,
     "shared_timeout"),
    ("shared_timeout-str", store(shared="local", shared_timeout="5"), T, "shared_timeout"),
    ("store-unknown-keyword", store(rma="1GiB"), TypeError, "rma"),
    ("store-testing-keyword", store(shm_free_bytes_for_testing=1), TypeError,
     "shm_free_bytes_for_testing"),
    # ---- CachedDataset(dataset, store, sampler, transform, spot_check)
    ("dataset-int", dataset(dataset=5), T, "dataset"),
    ("dataset-str", dataset(dataset="abc"), T, "dataset"),
    ("dataset-store-str", dataset(store="x"), T, "store"),
    ("dataset-sampler-list", dataset(sampler=[1, 2]), T, "sampler"),
    ("dataset-transform-str", dataset(transform="flip"), T, "transform"),
    ("spot_check-negative", dataset(spot_check=-1), E, "spot_check"),
    ("spot_check-float", dataset(spot_check=1.5), T, "spot_check"),
    ("spot_check-bool", dataset(spot_check=True), T, "spot_check"),
    ("dataset-unknown-keyword", dataset(bogus=1), TypeError, "bogus"),
    # ---- Store methods on an open store
    ("get-index-negative", lambda c: c.store.get(0, -1), R, "index"),
    ("get-index-past-end", lambda c: c.store.get(0, N), R, "index"),
    ("get-index-huge", lambda c: c.store.get(0, BIG), R, "index"),
    ("get-index-float", lambda c: c.store.get(0, 1.5), T, "index"),
    ("get-index-none", lambda c: c.store.get(0, None), T, "index"),
    ("get-index-bool", lambda c: c.store.get(0, True), T, "index"),
    ("get-position-negative", lambda c: c.store.get(-1, 0), R, "position"),
    ("get-position-huge", lambda c: c.store.get(BIG, 0), R, "position"),
    ("get-position-str", lambda c: c.store.get("0", 0), T, "position"),
    ("put-index-past-end", lambda c: c.store.put(0, N, uniform_item(0)), R, "index"),
    ("put-index-negative", lambda c: c.store.put(0, -1, uniform_item(0)), R, "index"),
    ("put-value-unpicklable", lambda c: c.store.put(0, 0, lambda: 1), T, "value"),
    ("get_batch-lengths", lambda c: c.store.get_batch([0, 1], [0]), E, "positions"),
    ("get_batch-index-past-end", lambda c: c.store.get_batch([0], [N]), R,
     f"indices: {N} is out of range (expected [0, {N}))"),  # the words of get's index
    ("get_batch-index-huge", lambda c: c.store.get_batch([0], [BIG]), R, "indices"),
    ("get_batch-position-negative", lambda c: c.store.get_batch([-1], [0]), R, "positions"),
    ("get_batch-position-float", lambda c: c.store.get_batch([0.5], [0]), T, "positions"),
    ("get_batch-indices-2d", lambda c: c.store.get_batch([0], [[0]]), E, "indices"),
    ("get_batch-indices-none", lambda c: c.store.get_batch([0], None), E, "indices"),
    ("locate-past-end", lambda c: c.store.locate([N]), R, "indices"),
    ("locate-str", lambda c: c.store.locate(["a"]), T, "indices"),
    ("peek-past-end", lambda c: c.store.peek(N), R, "index"),
    ("peek-float", lambda c: c.store.peek(0.5), T, "index"),
    ("mark_consumed-past-end", lambda c: c.store.mark_consumed([0], [N]), R, "indices"),
    ("begin_epoch-negative", lambda c: c.store.begin_epoch(-1), R, "position"),
    ("set_plan-id-past-end", lambda c: c.store.set_plan([0, N], 2, 0), R, "ids"),
    ("set_plan-epoch_length-negative", lambda c: c.store.set_plan([0, 1], -1, 0), E,
     "epoch_length"),
    ("read_into-payload_bytes-negative",
     lambda c: c.store.read_into([0], [0], [0], b"", -1, [], []), E, "payload_bytes"),
    # An offset near 2**64 wrapped past the check: put_rows wrote before its
    # buffer (a segfault); a meta of another size made the value unreadable.
    ("put_rows-offset-wraps", lambda c: c.store.put_rows(
        [0], [1], [0], META16, 16, [2**64 - 16], [torch.ones(1, 4)]), E, "past the payload"),
    ("read_into-offset-wraps", lambda c: c.store.read_into(
        [0], [1], [0], META16, 16, [2**64 - 16], [torch.ones(1, 4)]), E, "past the payload"),
    ("wait_for_puts-nan", lambda c: c.store.wait_for_puts(NAN), E, "timeout"),
    ("wait_for_puts-str", lambda c: c.store.wait_for_puts("5"), T, "timeout"),
    ("wait_for_puts-negative", lambda c: c.store.wait_for_puts(-1), E, "timeout"),
    ("store-path-not-utf8", lambda c: opt4store.Store("/tmp/o4s-\udcff", ram_items=N), E,
     "UTF-8"),
    ("put_rows-meta-of-another-size", lambda c: c.store.put_rows(
        [0], [1], [0], META16, 32, [0], [torch.ones(1, 4)]), E, "meta does not describe"),
    ("bind-sampler-str", lambda c: opt4store.Store(None, ram_items=N).bind(N, "x"), T, "sampler"),
    ("warn_once-kind-str", lambda c: c.store.warn_once("drift", "message"), T, "kind"),
    ("warn_once-message-int", lambda c: c.store.warn_once(1, 5), T, "message"),
    ("getitems-not-a-sequence", lambda c: c.ds.__getitems__(5), T, "indices"),
    ("getitems-index-str", lambda c: c.ds.__getitems__(["x"]), T, "indices"),
    ("getitems-index-past-end", lambda c: c.ds.__getitems__([0, N]), R, "indices"),
    ("load_batch-lengths", lambda c: c.ds.load_batch([0, 1], [0]), E, "positions"),
    ("get-closed-store-arg-unknown", lambda c: c.store.get(0, 0, 1), TypeError, "positional"),
    # ---- PlannedSampler
    ("epochs-str", lambda c: planned(epochs="x"), T, "epochs"),
    ("epochs-float", lambda c: planned(epochs=2.5), T, "epochs"),
    ("epochs-none", lambda c: planned(epochs=None), T, "epochs"),
    ("epochs-bool", lambda c: planned(epochs=True), T, "epochs"),
    ("epochs-zero", lambda c: planned(epochs=0), E, "epochs"),
    ("epochs-huge", lambda c: planned(epochs=BIG), E, "epochs"),
    ("planned-sampler-int", lambda c: planned(sampler=5), T, "sampler"),
    ("planned-sampler-str", lambda c: planned(sampler="abc"), T, "sampler"),
    ("set_epoch-str", on_sampler("set_epoch", "1"), T, "epoch"),
    ("set_epoch-float", on_sampler("set_epoch", 1.0), T, "epoch"),
    ("epoch_ids-str", on_sampler("epoch_ids", "0"), T, "epoch"),
    ("state_dict-consumed-float", on_sampler("state_dict", 1.5), T, "consumed"),
    ("state_dict-consumed-negative", on_sampler("state_dict", -1), E, "consumed"),
    ("note_yielded-str", on_sampler("note_yielded", "3"), T, "count"),
    ("load_state_dict-epoch-str", resumed(epoch="1"), T, "epoch"),
    ("load_state_dict-index-float", resumed(index=0.5), T, "index"),
    # ---- opt4store.DataLoader
    ("batch_size-zero", loader(batch_size=0), E, "batch_size"),
    ("batch_size-float", loader(batch_size=1.5), T, "batch_size"),
    ("batch_size-huge", loader(batch_size=BIG), E, "batch_size"),
    ("batch_size-bool", loader(batch_size=True), T, "batch_size"),
    ("num_workers-negative", loader(num_workers=-1), E, "num_workers"),
    ("num_workers-float", loader(num_workers=1.0), T, "num_workers"),
    ("timeout-nan", loader(timeout=NAN), E, "timeout"),
    ("timeout-negative", loader(timeout=-1), E, "timeout"),
    ("prefetch_factor-zero", loader(num_workers=1, prefetch_factor=0), E, "prefetch_factor"),
    ("drop_last-str", loader(drop_last="yes"), T, "drop_last"),
    ("pin_memory-int", loader(pin_memory=1), T, "pin_memory"),
    ("persistent_workers-none", loader(persistent_workers=None), T, "persistent_workers"),
    ("collate_fn-int", loader(collate_fn=5), T, "collate_fn"),
    ("worker_init_fn-str", loader(worker_init_fn="f"), T, "worker_init_fn"),
    ("generator-int", loader(generator=5), T, "generator"),
    ("device-bad-str", loader(device="gpu!"), E, "device"),
    # A sampler's indices, checked as ds[i] checks them (before: 0.5 read
    # item 0, True item 1, '1' item 1; 2**64 + 1 a raw OverflowError).
    ("loader-index-float", lambda c: list(opt4store.DataLoader(c.ds, sampler=[0.5, 1.5])), T,
     "indices"),
    ("loader-index-bool", lambda c: list(opt4store.DataLoader(c.ds, sampler=[True])), T,
     "indices"),
    ("loader-index-str", lambda c: list(opt4store.DataLoader(c.ds, sampler=["1"])), T,
     "indices"),
    ("loader-index-huge", lambda c: list(opt4store.DataLoader(c.ds, sampler=[BIG + 1])), R,
     "indices"),
    ("device-float", loader(device=1.5), T, "device"),
    ("loader-unknown-keyword", loader(bogus=1), TypeError, "bogus"),
    ("loader-load_state_dict-a-samplers-state",  # said "got NoneType"
     lambda c: opt4store.DataLoader(c.ds, sampler=planned()).load_state_dict(
         planned().state_dict()), E, "loader.state_dict()"),
    ("loader-set_epoch-float", lambda c: opt4store.DataLoader(c.ds).set_epoch(1.5), T, "epoch"),
    ("loader-set_epoch-negative", lambda c: opt4store.DataLoader(c.ds).set_epoch(-3), E, "epoch"),
    ("loader-dataset-plain", lambda c: opt4store.DataLoader(UniformDataset(N)), E, "CachedDataset"),
    # ---- to_device / DeviceLoader
    ("to_device-bad-device", lambda c: opt4store.to_device([], "nodevice"), E, "device"),
    ("to_device-none-device", lambda c: opt4store.to_device([], None), T, "device"),
    ("to_device-depth-negative", lambda c: opt4store.to_device([], "cpu", depth=-1), E, "depth"),
    ("to_device-depth-huge", lambda c: opt4store.to_device([], "cuda", depth=BIG), E, "depth"),
    ("to_device-non_blocking-str", lambda c: opt4store.to_device([], "cpu", non_blocking="y"),
     T, "non_blocking"),
    ("to_device-loader-int", lambda c: opt4store.to_device(5, "cpu"), T, "loader"),
    ("to_device-pace-int", lambda c: opt4store.to_device([], "cpu", pace=1), T, "pace"),
    ("DeviceLoader-pace-str", lambda c: opt4store.DeviceLoader([], "cuda", pace="auto"), T,
     "pace"),
    ("DeviceLoader-depth-float", lambda c: opt4store.DeviceLoader([], "cuda", depth=1.5), T,
     "depth"),
    # ---- the distributed helpers
    ("resolve_layout-half", lambda c: distributed.resolve_layout(1, None), E, "local_rank"),
    ("resolve_layout-negative", lambda c: distributed.resolve_layout(-1, 2), E, "local_rank"),
    ("resolve_layout-float", lambda c: distributed.resolve_layout(0.5, 2), T, "local_rank"),
    ("resolve_layout-too-high", lambda c: distributed.resolve_layout(2, 2), E, "local_rank"),
    ("resolve_layout-world-str", lambda c: distributed.resolve_layout(0, "2"), T,
     "local_world_size"),
    # ---- parse_size
    ("parse_size-negative", lambda c: opt4store.parse_size(-1, "budget"), E, "budget"),
    ("parse_size-huge", lambda c: opt4store.parse_size(BIG, "budget"), E, "budget"),
    ("parse_size-nan", lambda c: opt4store.parse_size(NAN, "budget"), E, "budget"),
]


def test_the_table_is_large():
    assert len(CASES) >= 60


@pytest.mark.parametrize("call,expected,word", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(tmp_path, call, expected, word):
    c = Context(tmp_path)
    try:
        with pytest.raises(expected) as info:
            call(c)
        error = info.value
        if expected is not TypeError:
            assert isinstance(error, opt4store.Error), repr(error)
        assert word in str(error), str(error)
        # A bad call loses nothing: the store (opened by the case or now)
        # still reads and writes.
        ds = c.ds
        for i in (0, N - 1):
            got = ds[i]
            assert torch.equal(got, uniform_item(i)), i
        assert torch.equal(c.store.get(opt4store.NO_POSITION, 0), uniform_item(0))
    finally:
        c.close()


def test_type_errors_are_type_errors_too():
    """InvalidTypeError is caught by `except TypeError` and by `except
    ValueError` (it is an InvalidArgumentError)."""
    with pytest.raises(TypeError):
        opt4store.Store(None, ram_items=1.5)
    with pytest.raises(ValueError):
        opt4store.Store(None, ram_items=1.5)


def test_testing_options_have_a_private_entry_point(store_path):
    from opt4store import _testing
    store = _testing.store_with_shm_free(store_path, 1 << 20, ram="64MiB", disk=0)
    with pytest.raises(opt4store.NoSpaceError):
        opt4store.CachedDataset(UniformDataset(N), store)


def test_a_huge_dev_shm_reports_its_free_space(store_path):
    """/dev/shm of 2^60 bytes: a RAM tier over the largest segment is
    refused naming the free space, not "0 bytes free"."""
    from opt4store import _testing
    store = _testing.store_with_shm_free(store_path, 1 << 60, ram_items=N, disk=0)
    ds = opt4store.CachedDataset(UniformDataset(N), store, spot_check=0)
    assert torch.equal(ds[3], uniform_item(3))
    store.close()
