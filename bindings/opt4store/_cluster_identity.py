"""A cluster store's plan identity: every rank's must be the same, and a
store filled for another plan must not serve this one (cluster.py checks
both when a store binds)."""

import os

from . import _core
from ._epochs import rank_epoch
from ._errors import InvalidArgumentError, StaleStoreError

# In a cluster store's directory: the identity of the plan it was filled
# for (plan_identity), written at each binding.
PLAN_FILE = "cluster_plan"


def plan_identity(sampler, dataset_size, world, local_world, window):
    """What fixes a cluster plan, as text: the dataset size, the epochs and
    their length, the ranks, the hosts' layout, peer_window, and rank 0's
    first epoch (the DistributedSampler's seed, shuffle and padding). Every
    rank's must be equal: a host serves a (rank, read) request from its
    own plan, so hosts whose plans differ would serve other items."""
    first = _core.plan_fingerprint(rank_epoch(sampler.sampler, 0, 0))
    return (f"dataset_size={dataset_size} epochs={sampler.epochs} "
            f"epoch_length={sampler.epoch_length} world={world} local_world={local_world} "
            f"peer_window={window} rank0_epoch0={first}")


def stale_plan(store_path, identity):
    """The identity a cluster store at `store_path` was filled for, when it
    is another than `identity` (None: the same, or none saved). Its values
    of other hosts' items are kept under ids its plan numbered, so they
    would be served as other items."""
    try:
        with open(os.path.join(store_path, PLAN_FILE), encoding="utf-8") as f:
            saved = f.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return saved if saved != identity else None


def save_plan(store_path, identity):
    """Writes `identity` into the store's directory (a store with a disk
    tier: one without writes nothing and keeps nothing)."""
    if store_path and os.path.isdir(os.path.join(store_path, "segments")):
        tmp = os.path.join(store_path, PLAN_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(identity + "\n")
        os.replace(tmp, os.path.join(store_path, PLAN_FILE))


def check_agreement(gathered, stale, store_path):
    """Raises on every rank alike when the ranks' plan identities differ
    (`gathered`: every rank's (identity, stale identity or None)), or when
    a host's store was filled for another plan."""
    ranks = [r for r, (identity, _) in enumerate(gathered) if identity != gathered[0][0]]
    if ranks:
        raise InvalidArgumentError(
            f"shared='cluster': the ranks' plans differ (the same dataset, epochs, "
            f"DistributedSampler seed and peer_window on every rank): rank 0 has "
            f"{gathered[0][0]}, rank {ranks[0]} {gathered[ranks[0]][0]}")
    hosts = [r for r, (_, old) in enumerate(gathered) if old is not None]
    if hosts:
        mine = f"; this one at {store_path!r} was filled for {stale}" if stale else ""
        raise StaleStoreError(
            f"shared='cluster': the stores of ranks {hosts} were filled for another cluster "
            f"plan (another seed, epoch count, dataset or layout{mine}); this run's is "
            f"{gathered[0][0]}. A cluster store keeps other hosts' items under ids of its "
            "plan, and would serve them as other items: remove those store directories to "
            "fill them anew, or run the plan they were filled for")
