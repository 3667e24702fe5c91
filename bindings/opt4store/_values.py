"""How Python values become a store value (meta + payload) and back.

Tags (kept in the value header written by the C++ side, value.h):
  1  a torch.Tensor: dtype and shape in the header, the bytes as payload
     (encoded and decoded in C++).
  2  a numpy array: the same, rebuilt as an array.
  3  a structure (tuple, list, dict) holding tensors, arrays and plain
     Python values: a pickled skeleton in the header's user bytes, in which
     each tensor or array is a leaf pointing at its bytes in the payload
     (each leaf aligned to 64 bytes).
  4  anything else picklable: pickle bytes as payload (slower; warns once).
  0  bytes that this package did not write (``opt4store import``): the
     payload as a uint8 tensor.
Everything decoded is a fresh copy: no view into the store's memory.
"""

import pickle
import warnings

import numpy as np
import torch

from . import _core

TAG_TENSOR = 1
TAG_NUMPY = 2
TAG_STRUCT = 3
TAG_PICKLE = 4

_ALIGN = 64
_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_warned_pickle = False


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
    return (a.dtype.kind, a.dtype.itemsize) in _ARRAY_DTYPES and a.dtype.fields is None


def _structurable(value, depth=0):
    """True if value is a structure made only of tensors, arrays and plain values."""
    if depth > 32:
        return False
    if isinstance(value, torch.Tensor):
        return value.dtype in TORCH_DTYPE_NAMES
    if isinstance(value, np.ndarray):
        return _supported_array(value)
    if isinstance(value, (np.generic,) + _PLAIN):
        return True
    if isinstance(value, (tuple, list)):
        return all(_structurable(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_structurable(v, depth + 1) for v in value.values())
    return False


def encode(value):
    """Returns (meta bytes, payload buffer) for a value that is not a tensor."""
    global _warned_pickle
    if isinstance(value, np.ndarray) and _supported_array(value):
        shape = value.shape  # ascontiguousarray makes a 0-d array 1-d
        a = np.ascontiguousarray(value)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        meta = _core.encode_header(a.dtype.str if a.dtype.itemsize > 1 else a.dtype.name,
                                   list(shape), TAG_NUMPY, b"")
        return meta, a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
    if isinstance(value, (tuple, list, dict)) and _structurable(value):
        chunks = []
        size = 0

        def flatten(v):
            nonlocal size
            if isinstance(v, torch.Tensor):
                t = v.detach().cpu().resolve_conj().resolve_neg().contiguous()
                data = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
                leaf = _Leaf("t", TORCH_DTYPE_NAMES[t.dtype], tuple(t.shape), size, data.nbytes)
            elif isinstance(v, np.ndarray):
                a = np.ascontiguousarray(v)
                if a.dtype.byteorder == ">":
                    a = a.astype(a.dtype.newbyteorder("<"))
                data = a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)
                leaf = _Leaf("a", a.dtype.str, v.shape, size, data.nbytes)
            elif isinstance(v, tuple):
                return tuple(flatten(x) for x in v)
            elif isinstance(v, list):
                return [flatten(x) for x in v]
            elif isinstance(v, dict):
                return {k: flatten(x) for k, x in v.items()}
            else:
                return v
            chunks.append((size, data))
            size += (data.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
            return leaf

        skeleton = flatten(value)
        payload = np.zeros(size, np.uint8)
        for offset, data in chunks:
            payload[offset:offset + data.nbytes] = data
        user = pickle.dumps(skeleton, protocol=pickle.HIGHEST_PROTOCOL)
        return _core.encode_header("bytes", [size], TAG_STRUCT, user), payload
    if not _warned_pickle:
        _warned_pickle = True
        warnings.warn(
            f"opt4store: caching a {type(value).__name__} through pickle, which is slower "
            "than tensors, arrays, or tuples/lists/dicts of them", RuntimeWarning, stacklevel=4)
    data = np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    return _core.encode_header("bytes", [data.nbytes], TAG_PICKLE, b""), data


def _rebuild(skeleton, payload):
    if isinstance(skeleton, _Leaf):
        raw = payload[skeleton.offset:skeleton.offset + skeleton.nbytes]
        if skeleton.kind == "t":
            dtype = _NAME_TO_TORCH[skeleton.dtype]
            t = raw.view(dtype) if dtype is not torch.uint8 else raw
            return t.view(skeleton.shape)
        # A copy: an array must not alias the payload tensor, whose storage
        # a DataLoader worker moves to shared memory (freeing the old one)
        # when it sends a tensor leaf of the same value to the main process.
        return raw.numpy().view(np.dtype(skeleton.dtype)).reshape(skeleton.shape).copy()
    if isinstance(skeleton, tuple):
        return tuple(_rebuild(x, payload) for x in skeleton)
    if isinstance(skeleton, list):
        return [_rebuild(x, payload) for x in skeleton]
    if isinstance(skeleton, dict):
        return {k: _rebuild(x, payload) for k, x in skeleton.items()}
    return skeleton


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
    return payload


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
