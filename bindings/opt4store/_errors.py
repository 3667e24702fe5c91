"""opt4store's exceptions. Every error the store reports is an ``Error``;
the subclasses also derive from the matching built-in where one fits, so
``except ValueError`` keeps working for bad arguments."""


class Error(Exception):
    """Base class of every error opt4store raises."""


class InvalidArgumentError(Error, ValueError):
    """Options that contradict each other or the existing store, a bad plan."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type (a float or a bool where an int is
    expected, a str where a path is): ``except TypeError`` catches it too."""


class BusyError(Error):
    """Another process holds the store open for writing."""


class NoSpaceError(Error):
    """A full disk, a budget that cannot fit, or /dev/shm too small."""


class CorruptionError(Error):
    """Bytes on disk failed a checksum or a format check."""


class NotFoundError(Error, KeyError):
    """No store at the path, or no such item."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OutOfRangeError(Error, IndexError):
    """An index at or past the dataset's end."""


class IOError_(Error, OSError):
    """The operating system refused a read, write or sync, or the store is closed."""


class StaleStoreError(Error):
    """The store holds values made by another version of the data: it was
    opened with another ``fingerprint=`` than the one it was filled for, or
    CachedDataset's spot check found a stored value that differs from the
    dataset's. Reopen it with ``reset=True``, or run ``opt4store clear PATH``."""
