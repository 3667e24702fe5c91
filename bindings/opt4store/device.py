"""to_device: batches into pinned memory, copied to the GPU on a side stream."""

import torch


def _apply(batch, fn):
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_apply(b, fn) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_apply(b, fn) for b in batch)
    if isinstance(batch, dict):
        return {k: _apply(v, fn) for k, v in batch.items()}
    return batch


class DeviceLoader:
    """Iterates a loader and yields each batch on ``device``. On CUDA, batch
    k+1 is pinned and copied on a side stream while the caller computes on
    batch k; the caller's stream waits for the copy before it uses a batch,
    and each tensor is tied to that stream (record_stream) so that its memory
    is not reused early. On the CPU it yields the loader's batches as they are.
    """

    def __init__(self, loader, device, non_blocking=True):
        self.loader = loader
        self.device = torch.device(device)
        self.non_blocking = non_blocking

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        if self.device.type != "cuda":
            yield from self.loader
            return
        stream = torch.cuda.Stream(device=self.device)
        pin = not getattr(self.loader, "pin_memory", False)

        def start(batch):
            with torch.cuda.stream(stream):
                def move(t):
                    if pin and not t.is_pinned():
                        t = t.pin_memory()
                    return t.to(self.device, non_blocking=self.non_blocking)
                moved = _apply(batch, move)
                event = torch.cuda.Event()
                event.record(stream)
            return moved, event

        iterator = iter(self.loader)
        try:
            pending = start(next(iterator))
        except StopIteration:
            return
        for batch in iterator:
            upcoming = start(batch)
            yield self._ready(*pending)
            pending = upcoming
        yield self._ready(*pending)

    def _ready(self, moved, event):
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        _apply(moved, lambda t: t.record_stream(current) or t)
        return moved


def to_device(loader, device, non_blocking=True):
    """Wraps a DataLoader so that its batches arrive on ``device``,
    copied asynchronously from pinned memory on a side CUDA stream. On the
    CPU it is the identity (the loader itself is returned)."""
    device = torch.device(device)
    if device.type == "cpu":
        return loader
    return DeviceLoader(loader, device, non_blocking)
