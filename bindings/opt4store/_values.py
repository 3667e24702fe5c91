"""How Python values become a store value (meta + payload) and back.

Tags (kept in the value header written by the C++ side, value.h):
  1  a torch.Tensor: dtype and shape in the header, the bytes as payload
     (encoded and decoded in C++). Not a subclass of it (a torchvision
     tv_tensor, a tensor with attributes): tag 4 keeps its class and
     attributes, in a structure too (a subclass pickle cannot name, defined
     inside a function, is kept as a plain tensor, with a warning).
  2  a numpy array: the same, rebuilt as an array.
  3  a structure (tuple, list, dict, and their subclasses: namedtuple,
     OrderedDict, defaultdict...) holding tensors, arrays and plain Python
     values: a pickled skeleton in the header's user bytes, in which each
     tensor, array and Python number (int within int64, float, bool) is a
     leaf pointing at its bytes in the payload, in traversal order (depth
     first, containers in iteration order), each aligned to 64 bytes. So two
     samples with the same structure, leaf dtypes and shapes, and the same
     other plain values (strings, None) have identical meta bytes, whatever
     their numbers: opt4store.DataLoader recognises a batch's layout by it.
     Containers keep their types (the skeleton pickles their class); a class
     pickle cannot name (defined inside a function) is kept as its plain
     base type, with a warning.
  4  anything else picklable: pickle bytes as payload (slower; warns once).
  0  a value this package did not write. ``opt4store import``'s: a row of
     an .npy file comes back as the numpy array ``np.load(file)[i]`` is,
     a file's bytes as the ``bytes`` that ``open(f, "rb").read()`` gives.
     Anything else (a C++ caller's meta of its own): the payload as a
     uint8 tensor.
Everything decoded is a fresh copy: no view into the store's memory.
"""

import copy
import io
import pickle
import warnings

import numpy as np
import torch

from . import _core
from ._errors import Error

TAG_TENSOR = 1
TAG_NUMPY = 2
TAG_STRUCT = 3
TAG_PICKLE = 4

_ALIGN = 64
_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_INT64 = (-(1 << 63), 1 << 63)
# Python numbers as leaves: kind, numpy dtype.
_NUMBER_LEAVES = {"i": "<i8", "f": "<f8", "b": "|b1"}
_warned_pickle = False
_warned_types = set()
# Store.warn_once's kind for the pickle warning (kinds from 32 are the
# package's; below, the engine's).
WARN_PICKLE = 32


class _Leaf:
    """A tensor or array in a structure's skeleton."""

    __slots__ = ("kind", "dtype", "shape", "offset", "nbytes")

    def __init__(self, kind, dtype, shape, offset, nbytes):
        self.kind, self.dtype, self.shape, self.offset, self.nbytes = kind, dtype, shape, offset, nbytes

    def __reduce__(self):
        return (_Leaf, (self.kind, self.dtype, self.shape, self.offset, self.nbytes))


TORCH_DTYPE_NAMES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
    torch.complex64: "complex64", torch.complex128: "complex128",
}
_NAME_TO_TORCH = {v: k for k, v in TORCH_DTYPE_NAMES.items()}


# (kind, itemsize) of the numpy dtypes the value header can name.
_ARRAY_DTYPES = {("b", 1), ("u", 1), ("i", 1), ("u", 2), ("i", 2), ("u", 4), ("i", 4),
                 ("u", 8), ("i", 8), ("f", 2), ("f", 4), ("f", 8), ("c", 8), ("c", 16)}


def _supported_array(a):
    """An array the value header can hold: of numpy's own type (a subclass,
    MaskedArray or matrix, goes through pickle, which keeps its class and
    mask; a memmap's data is an array's), of a dtype the header names."""
    return (type(a) is np.ndarray or isinstance(a, np.memmap)) and \
        (a.dtype.kind, a.dtype.itemsize) in _ARRAY_DTYPES and a.dtype.fields is None


def plain_tensor(value):
    """True for a tensor the store keeps as its bytes: torch.Tensor itself
    (no subclass, no attributes), strided (not sparse), of a dtype the
    header names. Anything else goes through pickle."""
    return type(value) is torch.Tensor and value.layout is torch.strided and \
        value.dtype in TORCH_DTYPE_NAMES and not value.__dict__


def _structurable(value, depth=0):
    """True if value is a structure made only of tensors (no subclass: a
    leaf keeps no class), arrays and plain values."""
    if depth > 32:
        return False
    if isinstance(value, torch.Tensor):
        return plain_tensor(value)
    if isinstance(value, np.ndarray):
        return _supported_array(value)
    if isinstance(value, (np.generic,) + _PLAIN):
        return True
    if isinstance(value, (tuple, list)):
        return all(_structurable(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_structurable(v, depth + 1) for v in value.values())
    return False


def encode(value, warn_once=None):
    """Returns (meta bytes, payload buffer) for a value that is not a tensor.
    warn_once(kind, message): issues a warning once (Store.warn_once: once
    per store, across workers); without it, once per process."""
    meta, chunks, size = encode_parts(value, warn_once)
    if len(chunks) == 1 and chunks[0][0] == 0 and chunks[0][1].nbytes == size:
        return meta, chunks[0][1]
    payload = np.zeros(size, np.uint8)
    for offset, data in chunks:
        payload[offset:offset + data.nbytes] = data
    return meta, payload


def encode_parts(value, warn_once=None):
    """(meta bytes, [(offset, uint8 array)], payload size): encode() without
    building the payload, for a caller that copies the pieces where they go
    (opt4store.DataLoader writes each leaf into its batch tensor). The arrays
    may be views of value's own memory."""
    global _warned_pickle
    if isinstance(value, np.ndarray) and _supported_array(value):
        shape = value.shape  # ascontiguousarray makes a 0-d array 1-d
        a = np.ascontiguousarray(value)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        meta = _core.encode_header(a.dtype.str if a.dtype.itemsize > 1 else a.dtype.name,
                                   list(shape), TAG_NUMPY, b"")
        data = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
        return meta, [(0, data)], data.nbytes
    if isinstance(value, (tuple, list, dict)) and _structurable(value):
        chunks = []
        size = 0

        def flatten(v):
            nonlocal size
            if type(v) is torch.Tensor:
                t = v.detach().cpu().resolve_conj().resolve_neg().contiguous()
                data = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
                leaf = _Leaf("t", TORCH_DTYPE_NAMES[t.dtype], tuple(t.shape), size, data.nbytes)
            elif isinstance(v, np.ndarray):
                a = np.ascontiguousarray(v)
                if a.dtype.byteorder == ">":
                    a = a.astype(a.dtype.newbyteorder("<"))
                data = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
                leaf = _Leaf("a", a.dtype.str, v.shape, size, data.nbytes)
            elif _number_kind(v) is not None:
                kind = _number_kind(v)
                data = np.array([v], dtype=_NUMBER_LEAVES[kind]).view(np.uint8)
                leaf = _Leaf(kind, _NUMBER_LEAVES[kind], (), size, data.nbytes)
            elif isinstance(v, (tuple, list, dict)):
                return map_container(v, flatten)
            else:
                return v
            chunks.append((size, data))
            size += (data.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
            return leaf

        try:
            skeleton = flatten(value)
        except (TypeError, ValueError):
            # A container whose type cannot hold leaves (torch.Size of
            # ints, a tuple subclass with its own constructor): the whole
            # value goes through pickle below, which keeps every type.
            skeleton = None
        if skeleton is not None:
            try:
                user = _pickle_skeleton(skeleton)
            except (pickle.PicklingError, AttributeError, TypeError):
                _warn_plain_types(value)
                user = _pickle_skeleton(_plain_containers(skeleton))
            meta = _core.encode_header("bytes", [size], TAG_STRUCT, user)
            # The skeleton (its leaves' places, the non-tensor parts) goes in
            # the meta, which the store caps; past that (a list of 2000 token
            # ids, a long string beside a tensor) the value goes whole, by
            # pickle, into the payload.
            if len(meta) <= _core.MAX_META_BYTES:
                return meta, chunks, size
    message = (f"opt4store: caching a {type(value).__name__} through pickle, which is slower "
               "than tensors, arrays, or tuples/lists/dicts of them")
    if warn_once is not None:
        warn_once(WARN_PICKLE, message)
    elif not _warned_pickle:
        _warned_pickle = True
        warnings.warn(message, RuntimeWarning, stacklevel=4)
    try:
        pickled = _pickled(value)
    except (pickle.PicklingError, AttributeError, TypeError):
        plain = _plain_tensors(value)
        if plain is value:
            raise
        _warn_plain_types(value, "tensor subclass", "torch.Tensor")
        return encode_parts(plain, warn_once)
    data = np.frombuffer(bytearray(pickled), np.uint8)  # writable: torch.from_numpy warns else
    return _core.encode_header("bytes", [data.nbytes], TAG_PICKLE, b""), [(0, data)], data.nbytes


def _pickled(value):
    """pickle.dumps(value), each tensor subclass, and each tensor with
    attributes, reduced here to (class, plain tensor, attributes): torch
    1.13 under Python 3.11 pickles a subclass without attributes with a
    state of None that its own rebuild cannot load back, and a plain
    tensor's attributes not at all."""
    out = io.BytesIO()
    _SubclassPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


class _SubclassPickler(pickle.Pickler):
    def reducer_override(self, obj):
        # A subclass, or a plain tensor with attributes (torch 1.13 drops
        # them); a Parameter keeps torch's own reduction.
        if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Parameter) and \
                (type(obj) is not torch.Tensor or obj.__dict__):
            return _rebuild_subclass, (type(obj), obj.as_subclass(torch.Tensor),
                                       dict(getattr(obj, "__dict__", None) or {}))
        return NotImplemented  # pickle's own reduction for everything else


def _rebuild_subclass(cls, plain, attributes):
    value = plain.as_subclass(cls)
    value.__dict__.update(attributes)
    return value


def _pickle_skeleton(skeleton):
    """The skeleton pickled without pickle's memo, so that equal skeletons
    give equal bytes whichever strings they happen to share (a value read
    back from the store shares fewer than the one loaded; batch layouts
    compare metas as bytes). A cyclic skeleton is pickled with the memo."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    try:
        pickler.dump(skeleton)
    except ValueError:  # fast mode refuses cycles
        return pickle.dumps(skeleton, protocol=pickle.HIGHEST_PROTOCOL)
    return out.getvalue()


def _number_kind(v):
    """The leaf kind of a Python number stored as a leaf, else None."""
    if type(v) is bool:
        return "b"
    if type(v) is int and _INT64[0] <= v < _INT64[1]:
        return "i"
    if type(v) is float:
        return "f"
    return None


def map_container(v, fn):
    """v's container, of v's own type, holding fn of each element (a
    namedtuple, a tuple/list/dict subclass such as defaultdict keep theirs)."""
    if isinstance(v, tuple):
        items = [fn(x) for x in v]
        if hasattr(v, "_fields"):  # a namedtuple
            return type(v)(*items)
        return tuple(items) if type(v) is tuple else type(v)(items)
    if isinstance(v, list):
        out = [fn(x) for x in v]
        if type(v) is list:
            return out
        copied = copy.copy(v)
        copied[:] = out
        return copied
    if type(v) is dict:
        return {k: fn(x) for k, x in v.items()}
    copied = copy.copy(v)  # a dict subclass keeps its extras (default_factory)
    for k in v:
        copied[k] = fn(v[k])
    return copied


def _plain_containers(skeleton):
    """The skeleton with every container as its plain base type."""
    if isinstance(skeleton, tuple):
        return tuple(_plain_containers(x) for x in skeleton)
    if isinstance(skeleton, list):
        return [_plain_containers(x) for x in skeleton]
    if isinstance(skeleton, dict):
        return {k: _plain_containers(x) for k, x in skeleton.items()}
    return skeleton


def _plain_tensors(value, depth=0):
    """value with each tensor subclass in it (through tuples, lists and
    dicts) as a plain tensor; value itself when it holds none."""
    if isinstance(value, torch.Tensor):
        return value if type(value) is torch.Tensor else value.as_subclass(torch.Tensor)
    if depth > 32 or not isinstance(value, (tuple, list, dict)):
        return value
    items = list(value.values() if isinstance(value, dict) else value)
    plain = [_plain_tensors(v, depth + 1) for v in items]  # once each: no rework per level
    if all(p is v for p, v in zip(plain, items)):
        return value
    done = iter(plain)  # map_container visits the elements in this order
    try:
        return map_container(value, lambda v: next(done))
    except (TypeError, ValueError):  # a container that cannot be rebuilt: pickle says why
        return value


def _nameable(cls):
    """True if pickle can name class cls (not one defined inside a function)."""
    try:
        pickle.dumps(cls, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def _warn_plain_types(value, what="container class", plain="tuple/list/dict"):
    name = type(value).__name__
    if (name, what) not in _warned_types:
        _warned_types.add((name, what))
        warnings.warn(
            f"opt4store: a {name} value holds a {what} that pickle cannot name "
            f"(defined inside a function?); the store keeps its plain {plain} type. "
            "Define the class at module level to keep it.", RuntimeWarning, stacklevel=5)


def _rebuild(skeleton, payload):
    if isinstance(skeleton, _Leaf):
        raw = payload[skeleton.offset:skeleton.offset + skeleton.nbytes]
        if skeleton.kind == "t":
            dtype = _NAME_TO_TORCH[skeleton.dtype]
            t = raw.view(dtype) if dtype is not torch.uint8 else raw
            return t.view(skeleton.shape)
        if skeleton.kind in _NUMBER_LEAVES:
            number = raw.numpy().view(np.dtype(skeleton.dtype))[0]
            return {"i": int, "f": float, "b": bool}[skeleton.kind](number)
        # A copy: an array must not alias the payload tensor, whose storage
        # a DataLoader worker moves to shared memory (freeing the old one)
        # when it sends a tensor leaf of the same value to the main process.
        return raw.numpy().view(np.dtype(skeleton.dtype)).reshape(skeleton.shape).copy()
    if isinstance(skeleton, (tuple, list, dict)):
        return map_container(skeleton, lambda x: _rebuild(x, payload))
    return skeleton


def decoded(result, default):
    """What _core.Store.get returned, decoded; `default` for None (not
    stored)."""
    if result is None:
        return default
    return result if type(result) is torch.Tensor else decode(result)


def decode(result):
    """The value for what _core.Store.get returned (not None): a tensor, or
    (tag, meta, payload) for everything else."""
    if isinstance(result, torch.Tensor):
        return result
    tag, meta, payload = result
    if tag == TAG_NUMPY:
        dtype, shape, _, _ = _core.decode_header(meta)
        a = payload.numpy()
        return a.view(np.dtype(dtype)).reshape(shape)
    if tag == TAG_STRUCT:
        _, _, _, user = _core.decode_header(meta)
        return _rebuild(pickle.loads(user), payload)
    if tag == TAG_PICKLE:
        return pickle.loads(payload.numpy().tobytes())
    return _foreign(meta, payload)


def _foreign(meta, payload):
    """A value of tag 0 (see the module docstring)."""
    try:
        dtype, shape, _, _ = _core.decode_header(meta)
    except Error:
        return payload
    if dtype == "bytes":
        return payload.numpy().tobytes()
    if dtype == "bfloat16":  # numpy has none
        return payload.view(torch.bfloat16).reshape(shape)
    return payload.numpy().view(np.dtype(dtype)).reshape(shape)


def structurable(value):
    """True if value is a tuple, list or dict made only of tensors, arrays
    and plain values (stored as a structure, not pickled whole)."""
    return _structurable(value)


def layout(meta):
    """The leaves of a value with this meta, in the order the payload holds
    them: [(kind, dtype, shape, offset, nbytes)], kind "t" a tensor, "a" a
    numpy array. None for a value that is neither a tensor nor a structure."""
    dtype, shape, tag, user = _core.decode_header(meta)
    if tag == TAG_TENSOR:
        itemsize = torch.empty(0, dtype=_NAME_TO_TORCH[dtype]).element_size()
        return [("t", dtype, tuple(shape), 0, int(np.prod(shape, dtype=np.int64)) * itemsize)]
    if tag != TAG_STRUCT:
        return None
    leaves = []

    def walk(node):
        if isinstance(node, _Leaf):
            leaves.append((node.kind, node.dtype, tuple(node.shape), node.offset, node.nbytes))
        elif isinstance(node, (tuple, list)):
            for x in node:
                walk(x)
        elif isinstance(node, dict):
            for x in node.values():
                walk(x)

    walk(pickle.loads(user))
    return leaves


def same_value(stored, loaded):
    """True if ``stored`` (a value read back from the store) holds what
    ``loaded`` (the source's value) does: the same dtype, shape and elements
    (torch.equal) for every tensor and array leaf, == for the other leaves
    (NaN equal to NaN), element by element through tuples, lists and dicts;
    a tensor subclass's class and attributes too (the store keeps them).
    Container types are not compared: the store may give a structure back
    as its plain base type. For CachedDataset's spot check."""
    if isinstance(loaded, torch.Tensor) or isinstance(stored, torch.Tensor):
        if not (isinstance(loaded, torch.Tensor) and isinstance(stored, torch.Tensor)):
            return False
        if type(stored) is not type(loaded):
            # A subclass that pickle cannot name is stored as a plain tensor.
            if type(stored) is not torch.Tensor or _nameable(type(loaded)):
                return False
        elif type(loaded) is not torch.Tensor and \
                not same_value(getattr(stored, "__dict__", {}), getattr(loaded, "__dict__", {})):
            return False
        a, b = stored.detach().cpu(), loaded.detach().cpu().resolve_conj().resolve_neg()
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(a, b) or ((a.is_floating_point() or a.is_complex()) and
                                     bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all()))
    if isinstance(loaded, np.ndarray) or isinstance(stored, np.ndarray):
        if not (isinstance(loaded, np.ndarray) and isinstance(stored, np.ndarray)):
            return False
        if stored.dtype.newbyteorder("=") != loaded.dtype.newbyteorder("=") or \
                stored.shape != loaded.shape:
            return False  # byte order aside: the store keeps arrays little-endian
        try:
            return bool(np.array_equal(stored, loaded, equal_nan=stored.dtype.kind in "fc"))
        except TypeError:
            return bool(np.array_equal(stored, loaded))
    if isinstance(loaded, dict) and isinstance(stored, dict):
        return list(stored.keys()) == list(loaded.keys()) and \
            all(same_value(stored[k], loaded[k]) for k in loaded)
    if isinstance(loaded, (tuple, list)) and isinstance(stored, (tuple, list)):
        return len(stored) == len(loaded) and \
            all(same_value(s, x) for s, x in zip(stored, loaded))
    if isinstance(loaded, (float, np.floating, np.complexfloating)) and \
            isinstance(stored, (float, np.floating, np.complexfloating)) and loaded != loaded:
        return stored != stored  # NaN (a numpy scalar's too)
    if type(loaded).__eq__ is not object.__eq__:
        try:
            return bool(stored == loaded)
        except Exception:  # noqa: BLE001 (an __eq__ that fails: compare the pickles)
            pass
    if type(stored) is not type(loaded):
        return False
    # Objects without a value == (identity only), such as those the store
    # pickles whole: equal when they pickle to the same bytes.
    try:
        return pickle.dumps(stored, protocol=pickle.HIGHEST_PROTOCOL) == \
            pickle.dumps(loaded, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001
        return False
