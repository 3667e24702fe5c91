"""PlannedSampler's state: where a run resumes (state_dict), and the
checks of a saved state against the sampler's plan."""

import copy

import torch

from . import _core
from ._checks import check_int
from ._epochs import EpochRecorder, rank_epoch
from ._errors import InvalidArgumentError


class SavedPlace:
    """PlannedSampler's state_dict and the fingerprints load_state_dict
    checks a state against (a base class: the attributes are
    PlannedSampler's own)."""

    def state_dict(self, consumed=None):
        """Where to resume: the epoch in progress and the samples of it done.
        Without ``consumed=``, the indices handed out count as done (at the
        epoch's end too): refused when a bound store did not read them here
        (DataLoader workers read them, and fetch ahead of the loop).
        ``consumed`` counts from the epoch's start, not from a resume point."""
        if consumed is None:
            self._check_count_is_exact()
            done = self._yielded
        else:
            done = check_int("consumed", consumed, maximum=self.epoch_length)
            if done < self._taken_from:
                raise InvalidArgumentError(
                    f"state_dict(consumed={done}): this epoch resumed at index "
                    f"{self._taken_from}, and consumed= counts from the epoch's start: pass "
                    f"{self._taken_from} + the samples processed since the resume")
        epoch = self._current_epoch if self._epoch > 0 else 0
        if done >= self.epoch_length:
            epoch, done = epoch + 1, 0
        return {"epoch": epoch, "index": done, "epochs": self.epochs,
                "epoch_length": self.epoch_length, "fingerprint": self.fingerprint,
                "seed": self.seed, "rank": getattr(self.sampler, "rank", None)}

    def _fingerprint_with_seed(self, seed):
        """(fingerprint, seed): this sampler's first epoch recorded again with
        `seed` when both this sampler and the saved one were unseeded (they
        drew different seeds); else this sampler's."""
        if self.seed is None or not isinstance(seed, int) or seed == self.seed:
            return self.fingerprint, self.seed
        other = copy.copy(self.sampler)
        other.generator = torch.Generator().manual_seed(seed)
        first = EpochRecorder(other).record()
        if len(first) != self.epoch_length:
            return self.fingerprint, self.seed
        return _core.plan_fingerprint(first), seed

    def _fingerprint_as_saved(self, state, fingerprint):
        """The fingerprint this sampler's order has as `state` was saved
        (None where it cannot be this plan's: no epochs): its first epoch
        recorded for state["rank"] when that is another rank of the same
        DistributedSampler. A state of more epochs (a plan that grew,
        PlannedSampler._grow) is this order too."""
        try:
            epochs = int(state.get("epochs", self.epochs))
        except (TypeError, ValueError):
            return None
        if epochs <= 0:
            return None
        rank = state.get("rank")
        if rank is not None and rank != getattr(self.sampler, "rank", None) and \
                hasattr(self.sampler, "num_replicas") and isinstance(rank, int) and \
                0 <= rank < self.sampler.num_replicas:
            return _core.plan_fingerprint(rank_epoch(self.sampler, rank, 0))
        return fingerprint

    def _check_count_is_exact(self):
        # Exact when nothing was handed out since the epoch began or resumed.
        stores = self._stores + self._read_through
        if self._counted_by_loader or not stores or self._yielded == self._taken_from:
            return
        # Read here: the last index handed out, or at the epoch's end any
        # since it began (drop_last's tail is handed out, never read).
        read = self._current_epoch * self.epoch_length + \
            (self._yielded - 1 if self._yielded < self.epoch_length else self._taken_from)
        last = read * self._stride + self._offset if self._positions is None else \
            int(self._positions[read])  # a cluster store's (use_positions)
        if any(store.last_position_read() >= last for store in stores):
            return
        raise InvalidArgumentError(
            f"state_dict() without consumed=: {self._yielded} of the {self.epoch_length} "
            f"indices of epoch {self._current_epoch} were handed out, but not read in this "
            "process: a DataLoader's workers read them and fetch batches ahead of the training "
            "loop, so resuming there would skip samples. Pass consumed= (the samples the loop "
            "has processed in this epoch), or, at an epoch's end, take state_dict() after "
            "set_epoch() of the next epoch; or use opt4store.DataLoader, whose state_dict() "
            "counts what it yielded")
