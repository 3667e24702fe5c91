"""Test-only entry points: the engine's testing hooks, kept out of the public
signatures (Store takes only its documented options). Not for users; no
compatibility is promised."""

from .store import Store


def store_with_shm_free(path, shm_free_bytes, **options):
    """``Store(path, **options)`` whose /dev/shm probe reports
    ``shm_free_bytes`` free bytes, to test a /dev/shm too small or huge."""
    return Store._open_for_testing(path, {"shm_free_bytes_for_testing": shm_free_bytes},
                                   **options)
