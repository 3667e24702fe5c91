"""Byte sizes as people write them: 512MiB, 2GiB, 1.5GB, or plain bytes."""

from ._errors import InvalidArgumentError

_UNITS = {
    "": 1, "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
}


def parse_size(value, name="size"):
    """Returns a byte count for an int or a string such as '2GiB'."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name}: expected a size, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"{name}: {value} is negative")
        return value
    if isinstance(value, float):
        if value < 0 or value != value:
            raise InvalidArgumentError(f"{name}: {value} is not a size")
        return int(value)
    text = str(value).strip()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
    unit = text[len(number):].strip().lower()
    if unit not in _UNITS or not number:
        raise InvalidArgumentError(
            f"{name}: cannot read {value!r} as a size (examples: 512MiB, 2GiB, 1000000)")
    try:
        amount = float(number) if "." in number else int(number)
    except ValueError:
        raise InvalidArgumentError(f"{name}: cannot read {value!r} as a size") from None
    if amount < 0:
        raise InvalidArgumentError(f"{name}: {value!r} is negative")
    return int(amount * _UNITS[unit])
