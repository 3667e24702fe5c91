"""Training as users write it (issue 14): torchvision's ImageFolder with a
Compose transform, a small CNN, DataLoader workers, drop_last, a random
augmentation after the cache, a wrapper Dataset, a checkpoint and a resume in
a new store object, and two DDP ranks on gloo with one checkpoint for both.
Every sample is checked against the plain ImageFolder."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.utils.data
from PIL import Image

import opt4store
from o4s_testlib import IntIndexWrapper, child_env

# build.sh installs Debian's python3-torchvision; a pip environment may lack it.
torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed")
transforms = torchvision.transforms

CLASSES = ("cat", "dog", "fox")
PER_CLASS = 12
N = len(CLASSES) * PER_CLASS  # 36 images
BATCH = 8                     # 36 = 4 x 8 + 4: drop_last leaves 4 unread each epoch
EPOCHS = 3


def image_folder(root):
    """ImageFolder's layout: root/<class>/<image>.png, 40x40 noise images."""
    if not os.path.isdir(os.path.join(root, CLASSES[0])):
        g = np.random.default_rng(3)
        for c in CLASSES:
            os.makedirs(os.path.join(root, c), exist_ok=True)
            for k in range(PER_CLASS):
                pixels = g.integers(0, 256, size=(40, 40, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(os.path.join(root, c, f"{k:03d}.png"))
    return root


def plain_dataset(root):
    return torchvision.datasets.ImageFolder(root, transform=transforms.Compose([
        transforms.Resize(36), transforms.CenterCrop(32), transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))]))


class WithIndex(torch.utils.data.Dataset):
    """(image, label, index): the wrapper users write to know which sample."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        image, label = self.ds[int(i)]
        return image, label, int(i)


def random_flip(sample):
    """Augmentation after the cache, as transform= runs it on every read."""
    image, label, index = sample
    if torch.rand(()) < 0.5:
        image = image.flip(-1)
    return image, label, index


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, len(CLASSES)))


def references(root):
    ds = plain_dataset(root)
    return [ds[i] for i in range(N)]


def check_batch(batch, refs, flipped=False):
    """Wrong samples in a batch (0 when each equals the plain dataset's)."""
    images, labels, indices = batch
    wrong = 0
    for image, label, index in zip(images, labels.tolist(), indices.tolist()):
        ref_image, ref_label = refs[index]
        same = torch.equal(image, ref_image) or (flipped and torch.equal(image, ref_image.flip(-1)))
        wrong += not same or label != ref_label
    return wrong


def step(model, optimizer, batch):
    images, labels, _ = batch
    loss = nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def cached(root, path, epochs=EPOCHS, ram_ratio=3, transform=None, seed=1):
    store = opt4store.Store(path, ram_items=N // ram_ratio, disk="32MiB")
    sampler = opt4store.PlannedSampler(
        torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(seed)),
        epochs=epochs)
    ds = opt4store.CachedDataset(WithIndex(plain_dataset(root)), store, sampler,
                                 transform=transform)
    return store, sampler, ds


def test_imagefolder_with_opt4store_dataloader(tmp_path):
    """2 workers, drop_last, a random flip after the cache, 3 epochs: every
    sample right, each image decoded once, 4 full batches an epoch."""
    root = image_folder(str(tmp_path / "images"))
    refs = references(root)
    store, sampler, ds = cached(root, tmp_path / "store", transform=random_flip)
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrong = batches = flips = 0
    for _ in range(EPOCHS):
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True,
                                      num_workers=2)
        for batch in loader:
            wrong += check_batch(batch, refs, flipped=True)
            flips += sum(not torch.equal(img, refs[i][0])
                         for img, i in zip(batch[0], batch[2].tolist()))
            batches += 1
            step(model, optimizer, batch)
    st = store.stats()
    store.close()
    assert wrong == 0
    assert batches == EPOCHS * (N // BATCH)
    assert 0 < flips < EPOCHS * (N // BATCH) * BATCH  # augmentation varies per read
    assert st["source_loads"] == N, st  # each image decoded once in 3 epochs
    assert st["expect_timeouts"] == 0, st


def test_a_wrapper_dataset_under_torchs_dataloader(tmp_path):
    """torch's DataLoader, 2 workers, drop_last, a wrapper that calls
    ds[int(i)]: every sample right, each image decoded once, the store's
    frontier follows the run, no reader waits in vain."""
    root = image_folder(str(tmp_path / "images"))
    refs = references(root)
    store, sampler, ds = cached(root, tmp_path / "store")
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrong = 0
    for _ in range(EPOCHS):
        loader = torch.utils.data.DataLoader(IntIndexWrapper(ds), sampler=sampler,
                                             batch_size=BATCH, drop_last=True, num_workers=2)
        for batch in loader:
            wrong += check_batch(batch, refs)
            step(model, optimizer, batch)
    # The last epoch's reads all count at their plan positions; the earlier
    # epochs' unread tails are passed within the store's grace (100 ms).
    end = (EPOCHS - 1) * N + N // BATCH * BATCH
    deadline = time.monotonic() + 5
    while store.stats()["position"] < end and time.monotonic() < deadline:
        time.sleep(0.02)
    st = store.stats()
    store.close()
    assert wrong == 0
    assert st["source_loads"] == N, st
    assert st["expect_timeouts"] == 0 and st["drift"] == 0, st
    assert st["position"] == end, st
    assert st["abandoned_positions"] == (EPOCHS - 1) * (N % BATCH), st


def run_with_checkpoint(root, tmp_path, stop_at):
    """Trains EPOCHS epochs; at (epoch, batch) == stop_at saves a checkpoint,
    drops everything, reopens the store as a new run would and resumes.
    Returns (indices in training order, the model's parameters)."""
    path = tmp_path / f"store-{stop_at}"
    store, sampler, ds = cached(root, path)
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True,
                                  num_workers=2)
    order = []
    epoch = 0
    checkpoint = tmp_path / "checkpoint.pt"
    while epoch < EPOCHS:
        for b, batch in enumerate(loader):
            order.extend(batch[2].tolist())
            step(model, optimizer, batch)
            if (epoch, b) == stop_at:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "loader": loader.state_dict(), "epoch": epoch}, checkpoint)
                break
        else:
            epoch += 1
            continue
        # The run stops here; a new one starts from the checkpoint.
        del loader
        store.close()
        store, sampler, ds = cached(root, path)
        model = small_cnn()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=BATCH, drop_last=True,
                                      num_workers=2)
        loader.load_state_dict(state["loader"])
        stop_at = None
    st = store.stats()
    store.close()
    return order, [p.detach().clone() for p in model.parameters()], st


def test_checkpoint_and_resume_in_a_new_store_object(tmp_path):
    """The resumed run trains on exactly the samples the uninterrupted one
    does, in the same order, and ends with the same weights."""
    root = image_folder(str(tmp_path / "images"))
    whole, weights, _ = run_with_checkpoint(root, tmp_path, stop_at=None)
    resumed, resumed_weights, st = run_with_checkpoint(root, tmp_path, stop_at=(1, 1))
    assert len(whole) == EPOCHS * (N // BATCH) * BATCH
    assert resumed == whole
    for a, b in zip(weights, resumed_weights):
        assert torch.allclose(a, b, atol=1e-6)
    assert st["drift"] == 0, st


# ---------------------------------------------------------------- two DDP ranks

WORLD = 2
DDP_BATCH = 4  # each rank reads 18 a epoch: 4 batches, 2 left by drop_last


def _rank_main(config_path, rank):
    """One DDP rank: ImageFolder, DistributedSampler, a store shared by the
    host's ranks, DDP over the small CNN. Trains 1 epoch and 2 batches,
    rank 0 saves one checkpoint, every rank reopens and resumes from it."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    with open(config_path) as f:
        cfg = json.load(f)
    dist.init_process_group("gloo", init_method="file://" + cfg["rendezvous"], rank=rank,
                            world_size=WORLD)
    refs = references(cfg["root"])

    def start():
        base = torch.utils.data.DistributedSampler(range(N), num_replicas=WORLD, rank=rank,
                                                   shuffle=True, seed=5)
        sampler = opt4store.PlannedSampler(base, epochs=EPOCHS)
        store = opt4store.Store(cfg["store"], ram_items=N // 3, disk="32MiB", shared="local",
                                local_rank=rank, local_world_size=WORLD)
        ds = opt4store.CachedDataset(WithIndex(plain_dataset(cfg["root"])), store, sampler)
        loader = opt4store.DataLoader(ds, sampler=sampler, batch_size=DDP_BATCH, drop_last=True)
        return store, sampler, loader

    store, sampler, loader = start()
    model = DistributedDataParallel(small_cnn())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrong, order = 0, []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # as DDP loops do
        for b, batch in enumerate(loader):
            wrong += check_batch(batch, refs)
            order.extend(batch[2].tolist())
            step(model, optimizer, batch)
            if (epoch, b) == (1, 1):
                break
        else:
            continue
        break
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "loader": loader.state_dict()},
                   cfg["checkpoint"])
    store.close()  # every rank: the owner's waits for the reader's
    dist.barrier()

    store, sampler, loader = start()
    state = torch.load(cfg["checkpoint"])  # rank 0's, on every rank
    model.module.load_state_dict(state["model"])
    loader.load_state_dict(state["loader"])
    dist.barrier()  # local rank 0 re-planned the shared store
    for epoch in range(1, EPOCHS):
        sampler.set_epoch(epoch)
        for batch in loader:
            wrong += check_batch(batch, refs)
            order.extend(batch[2].tolist())
            step(model, optimizer, batch)
    plan = sampler.plan.tolist()
    length = sampler.epoch_length
    store.close()
    with open(cfg["results"] + f".{rank}", "w") as f:
        json.dump({"wrong": int(wrong), "order": order, "plan": plan, "length": length}, f)
    dist.destroy_process_group()


def test_two_ddp_ranks_resume_from_one_checkpoint(tmp_path):
    """Each rank trains on its own DistributedSampler share; after the
    resume from rank 0's checkpoint, each continues its own order exactly
    where it stopped: every planned batch once, none skipped or repeated."""
    root = image_folder(str(tmp_path / "images"))
    cfg = {"rendezvous": str(tmp_path / "rendezvous"), "root": root,
           "store": str(tmp_path / "store"), "checkpoint": str(tmp_path / "checkpoint.pt"),
           "results": str(tmp_path / "result")}
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(cfg))
    code = "import sys, test_training; test_training._rank_main(sys.argv[1], int(sys.argv[2]))"
    procs = []
    for rank in range(WORLD):
        env = child_env()
        env.update({"RANK": str(rank), "WORLD_SIZE": str(WORLD), "OMP_NUM_THREADS": "1"})
        procs.append(subprocess.Popen([sys.executable, "-c", code, str(config_path), str(rank)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    try:
        outputs = [p.communicate(timeout=180)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the ranks did not finish in time:\n" +
                    "\n".join(p.communicate()[0] for p in procs))
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} failed (rc {p.returncode}):\n{out}"
    orders = []
    for rank in range(WORLD):
        with open(cfg["results"] + f".{rank}") as f:
            r = json.load(f)
        assert r["wrong"] == 0, rank
        length, plan = r["length"], r["plan"]
        used = length // DDP_BATCH * DDP_BATCH  # drop_last
        expected = [plan[e * length + k] for e in range(EPOCHS) for k in range(used)]
        assert r["order"] == expected, rank
        orders.append(r["order"])
    assert orders[0] != orders[1]  # each rank its own share
