"""InheritedItems (opt4store/_cluster_heirs.py): a new home's cache of a
lost host's items keeps, under its capacity, the items used soonest (OPT
with bypass), with uses skipped by ranks that never asked, checked against a
brute-force scan of every held item at each choice."""

import random

import pytest

from opt4store._cluster_heirs import InheritedItems


class BruteForce:
    """The same rules, each eviction scanning every held item."""

    def __init__(self, uses, capacity):
        self.uses = {item: list(steps) for item, steps in uses.items()}
        self.capacity, self.values, self.loads = capacity, set(), 0

    def next_use(self, item, floor):
        steps = self.uses.get(item)
        while steps and steps[0] < floor:
            steps.pop(0)
        return steps[0] if steps else None

    def take(self, item, step, floor):
        steps = self.uses.get(item, [])
        if step in steps:
            steps.remove(step)
        if item not in self.values:
            self.loads += 1
            upcoming = self.next_use(item, floor)
            if upcoming is None:
                return
            while len(self.values) + 1 > self.capacity:
                far = {i: self.next_use(i, floor) for i in self.values}
                victim = max(far, key=lambda i: float("inf") if far[i] is None else far[i])
                if far[victim] is not None and far[victim] <= upcoming:
                    return
                self.values.discard(victim)
            self.values.add(item)
        elif self.next_use(item, floor) is None:
            self.values.discard(item)


@pytest.mark.parametrize("seed", range(40))
def test_inherited_items_choose_as_a_full_scan_does(seed):
    rng = random.Random(seed)
    items, steps = rng.randint(5, 40), rng.randint(50, 400)
    capacity = rng.randint(1, 12)
    # Distinct steps: no two items are next used at one step.
    order = rng.sample(range(steps * 3), steps)
    order.sort()
    uses = {}
    reads = []
    for step in order:
        item = rng.randrange(items)
        uses.setdefault(item, []).append(step)
        reads.append((step, item))
    cache = InheritedItems(lambda item: (b"m", bytes([item % 256]) * 3))
    cache.replan({item: list(s) for item, s in uses.items()}, capacity, False)
    reference = BruteForce(uses, capacity)
    lag = rng.choice([0, 5, 40])
    for step, item in reads:
        if rng.random() < 0.1:
            continue  # a rank that never asked: its use passes below the floor
        floor = max(0, step - lag)
        value = cache.take(item, step, floor)
        reference.take(item, step, floor)
        assert value == (b"m", bytes([item % 256]) * 3)
        # Items whose uses all passed unasked are alike (never used again):
        # which of them leaves first is a tie, so only the rest must agree.
        def live(held):
            return {i for i in held if reference.next_use(i, floor) is not None}
        assert live(cache.values) == live(reference.values), step
        assert cache.held == len(cache.values) == len(reference.values) <= capacity
    assert cache.loads == reference.loads


def test_inherited_items_by_bytes_stay_within_capacity():
    sizes = {item: 10 + 7 * item for item in range(20)}
    cache = InheritedItems(lambda item: (b"", b"x" * sizes[item]))
    uses = {item: [item, item + 20, item + 40] for item in range(20)}
    cache.replan(uses, 200, True)
    for step in range(60):
        cache.take(step % 20, step, step)
        assert cache.held == sum(sizes[i] for i in cache.values) <= 200
    assert cache.loads < 60  # something was kept for a later use
