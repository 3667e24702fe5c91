"""Byte sizes as people write them: 512MiB, 2GiB, 1.5GB, or plain bytes.

Text is read by the C++ ParseSize (engine/include/opt4store/sizes.h), the
parser the opt4store CLI uses too, so a size means the same in both: a
number, an optional space and a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB;
any case); a fraction only with a unit above B, rounded to the nearest
byte; no sign, exponent, digit grouping or one-letter unit ('k').
"""

import operator

import numpy as np

from . import _core
from ._errors import InvalidArgumentError, InvalidTypeError

_MAX_SIZE = (1 << 64) - 1


def parse_size(value, name="size"):
    """Returns the byte count of ``value``: a string such as ``'2GiB'``, or an
    int (a numpy integer too) from 0 to 2**64 - 1, which passes through.
    ``None`` stays ``None`` (an option not given). Anything else, and a
    string that is not a size, raises InvalidArgumentError naming ``name``
    (InvalidTypeError, also a TypeError, for a value of another type)."""
    if value is None:
        return None
    if isinstance(value, str):
        return _core.parse_size(value, name)
    if isinstance(value, (bool, np.bool_)):
        raise InvalidTypeError(f"{name}: expected a size, got {value!r}")
    try:
        count = operator.index(value)
    except TypeError:
        raise InvalidTypeError(
            f"{name}: expected a byte count (int) or a size string such as '2GiB', "
            f"got {type(value).__name__} {value!r}") from None
    if count < 0:
        raise InvalidArgumentError(f"{name}: {count} is negative")
    if count > _MAX_SIZE:
        raise InvalidArgumentError(f"{name}: {count} is too large (the largest size is "
                                   f"{_MAX_SIZE} bytes)")
    return count
