"""Argument checks shared by the public entry points. Each names the
argument in its message and raises an opt4store error: InvalidTypeError
(also a TypeError) for a value of the wrong type, InvalidArgumentError (also
a ValueError) for one out of its range, OutOfRangeError (also an
IndexError) for an index past the dataset.

Ints are Python ints or numpy integers; a bool is not an int here, nor is a
float with an integral value (1.0): silently truncating is what these checks
are for."""

import math
import multiprocessing
import multiprocessing.context
import numbers
import operator
import os

import numpy as np

from ._errors import InvalidArgumentError, InvalidTypeError, OutOfRangeError

# The largest count an option may hold: what C++ keeps in a uint64.
MAX_UINT64 = (1 << 64) - 1
# The largest int64 (a signed count, a timeout in milliseconds).
MAX_INT64 = (1 << 63) - 1


def _describe(value):
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_int(name, value, minimum=0, maximum=MAX_UINT64, allow_none=False):
    """``value`` as a Python int in [minimum, maximum]; None passes when
    allow_none."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidTypeError(f"{name}: expected an int, got {_describe(value)}")
    count = operator.index(value)
    if count < minimum:
        raise InvalidArgumentError(f"{name}: {count} is below the minimum {minimum}")
    if maximum is not None and count > maximum:
        raise InvalidArgumentError(f"{name}: {count} is above the maximum {maximum}")
    return count


def check_number(name, value, minimum=0.0, allow_inf=False, allow_none=False):
    """``value`` (an int or a float, not NaN) as a float >= minimum."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{name}: expected a number, got {_describe(value)}")
    number = float(value)
    if math.isnan(number) or (math.isinf(number) and not allow_inf):
        raise InvalidArgumentError(f"{name}: expected a finite number, got {value!r}")
    if number < minimum:
        raise InvalidArgumentError(f"{name}: {value!r} is below the minimum {minimum}")
    return number


def check_bool(name, value):
    """True or False (a numpy bool too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidTypeError(f"{name}: expected True or False, got {_describe(value)}")
    return bool(value)


def check_str(name, value, allow_none=False, allow_empty=False):
    """A str, non-empty unless allow_empty, without NUL characters."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name}: expected a str, got {_describe(value)}")
    if not value and not allow_empty:
        raise InvalidArgumentError(f"{name}: expected a non-empty str")
    if "\0" in value:
        raise InvalidArgumentError(f"{name}: {value!r} holds a NUL character")
    return value


def check_callable(name, value, allow_none=True):
    if value is None and allow_none:
        return None
    if not callable(value):
        raise InvalidTypeError(f"{name}: expected a callable, got {_describe(value)}")
    return value


def check_multiprocessing_context(name, value, num_workers):
    """A DataLoader's start method, checked as torch's DataLoader checks it
    (there, only when its first workers start): None, or with num_workers >
    0, a start method's name (returned as its context) or a multiprocessing
    context."""
    if value is None:
        return None
    if num_workers == 0:
        raise InvalidArgumentError(f"{name} is for num_workers > 0 (got {_describe(value)})")
    if isinstance(value, str):
        methods = multiprocessing.get_all_start_methods()
        if value not in methods:
            raise InvalidArgumentError(f"{name}: {value!r} is not a start method here "
                                       f"(expected one of {methods})")
        return multiprocessing.get_context(value)  # as torch's DataLoader keeps it
    if not isinstance(value, multiprocessing.context.BaseContext):
        raise InvalidTypeError(f"{name}: expected a start method's name or a multiprocessing "
                               f"context, got {_describe(value)}")
    return value


def check_dir_path(name, value):
    """A store directory: a str or os.PathLike naming a directory, or a path
    that does not exist yet; not a file, not empty."""
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, (str, os.PathLike)):
        raise InvalidTypeError(f"{name}: expected a str or os.PathLike path, got "
                               f"{_describe(value)}")
    path = os.fspath(value)
    if not isinstance(path, str):
        raise InvalidTypeError(f"{name}: expected a str path, got {_describe(path)}")
    check_str(name, path)
    try:  # the native store takes UTF-8; a name os.fsdecode made with surrogates is not
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{name}: {path!r} is not valid UTF-8") from None
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidArgumentError(f"{name}: {path!r} exists and is not a directory")
    return path


def check_sequence(name, value):
    """A sized, indexable sequence (a list, tuple, numpy array or tensor),
    not a str or bytes."""
    if isinstance(value, (str, bytes, bytearray)) or not (
            hasattr(value, "__len__") and hasattr(value, "__getitem__")):
        raise InvalidTypeError(f"{name}: expected a sequence of ints, got {_describe(value)}")
    return value


def check_index(name, value, size):
    """An item index in [0, size) (size None: not known yet, only >= 0)."""
    if type(value) is int and 0 <= value and (size is None or value < size):
        return value  # the common case, cheap
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidTypeError(f"{name}: expected an int, got {_describe(value)}")
    index = operator.index(value)
    if index < 0 or (size is not None and index >= size):
        where = f"[0, {size})" if size is not None else "0 or more"
        raise OutOfRangeError(f"{name}: {index} is out of range (expected {where})")
    return index


def check_position(name, value):
    """A plan position: an int in [0, 2**64 - 1] (the last is NO_POSITION)."""
    if type(value) is int and 0 <= value <= MAX_UINT64:
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidTypeError(f"{name}: expected an int position, got {_describe(value)}")
    position = operator.index(value)
    if not 0 <= position <= MAX_UINT64:
        raise OutOfRangeError(f"{name}: {position} is out of range (expected [0, 2**64 - 1])")
    return position


def paired_ints(positions, indices, size):
    """positions (uint64) and indices (int64, in [0, size)) as arrays of one
    length."""
    positions = int_array("positions", positions, np.uint64)
    indices = int_array("indices", indices, np.int64, size)
    if len(positions) != len(indices):
        raise InvalidArgumentError(f"positions and indices differ in length: "
                                   f"{len(positions)} and {len(indices)}")
    return positions, indices


def int_array(name, values, dtype, size=None, out_of_range=OutOfRangeError):
    """A 1-D numpy array of dtype (np.int64 or np.uint64) from a sequence or
    array of ints, each checked: [0, size) when size is given, else within
    dtype's range (and >= 0)."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidTypeError(f"{name}: expected a sequence of ints ({e})") from None
    if array.ndim != 1:
        raise InvalidArgumentError(f"{name}: expected a 1-D sequence, got {array.ndim}-D")
    if array.size == 0:
        return np.zeros(0, dtype=dtype)
    if array.dtype.kind == "f" and not isinstance(values, np.ndarray):
        # NumPy 1 makes floats of Python ints past int64's range beside
        # others (NO_POSITION in a batch of planned positions): each is checked.
        array = np.asarray(values, dtype=object)
    if array.dtype.kind == "O":
        checked = [check_position(name, v) if dtype == np.uint64 else check_index(name, v, size)
                   for v in array.tolist()]
        return np.asarray(checked, dtype=dtype)
    if array.dtype.kind not in "iu":
        raise InvalidTypeError(f"{name}: expected ints, got an array of {array.dtype}")
    low, high = int(array.min()), int(array.max())
    top = (size - 1) if size is not None else int(np.iinfo(dtype).max)
    if low < 0 or high > top:
        bad = low if low < 0 else high
        where = f"[0, {size})" if size is not None else f"[0, {top}]"  # as check_index says
        raise out_of_range(f"{name}: {bad} is out of range (expected {where})")
    return array.astype(dtype, copy=False)
