"""gpu_bench.py's heavy setting: its source, a Dataset that decodes a
larger JPEG and runs a chain of PIL work on every access, ending in the
standard setting's 3x256x256 uint8 (so the cache moves the same bytes; only
the source is slower), and the JPEGs it reads."""

import multiprocessing
import os

import numpy as np
import torch
from PIL import Image, ImageFilter

from demo import OUT, JpegDataset
from e2e_bench import written_once

IMAGE_SEED = 1  # the JPEGs' noise: the same bytes for the same index
HEAVY_SIDE = 1024
HEAVY_WORK = ("decode a 1024x1024 JPEG, resize to 512x512 (bilinear), GaussianBlur(2), "
              "UnsharpMask(2, 150, 3), DETAIL, resize to 256x256 (bilinear)")


class HeavyJpegDataset(JpegDataset):
    """The heavy setting's source: a larger JPEG and a chain of PIL work on
    every access, ending in the standard setting's 3x256x256 uint8."""

    def __getitem__(self, i):
        with Image.open(self.files[i]) as im:
            im = im.convert("RGB").resize((2 * OUT, 2 * OUT), Image.BILINEAR)
        im = im.filter(ImageFilter.GaussianBlur(2))
        im = im.filter(ImageFilter.UnsharpMask(2, 150, 3)).filter(ImageFilter.DETAIL)
        im = im.resize((OUT, OUT), Image.BILINEAR)
        return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1).contiguous()


def write_heavy_image(job):
    """One HEAVY_SIDE JPEG: diagonal bands and seeded noise (so that the
    decoder has entropy to work through), the same bytes for the same index."""
    folder, i = job
    rng = np.random.default_rng(IMAGE_SEED * 100003 + i)
    yy, xx = np.mgrid[0:HEAVY_SIDE, 0:HEAVY_SIDE]
    bands = np.stack([(xx + yy * (i % 3 + 1)) // 3, (xx * (i % 4 + 1) - yy) // 5,
                      (xx * yy) // 4096 + 16 * i], -1)
    pixels = (bands + rng.integers(0, 80, (HEAVY_SIDE, HEAVY_SIDE, 3))) % 256
    Image.fromarray(pixels.astype(np.uint8)).save(os.path.join(folder, f"{i:05d}.jpg"),
                                                  quality=92)


def write_heavy_images(folder, n):
    """The n heavy JPEGs, by a process per core."""
    with multiprocessing.Pool(os.cpu_count()) as pool:
        pool.map(write_heavy_image, [(folder, i) for i in range(n)], chunksize=4)


def heavy_image_set(work_dir, n):
    """The n heavy JPEGs under work_dir/heavy-SIDE-n, written once and reused."""
    folder = os.path.join(work_dir, f"heavy-{HEAVY_SIDE}-{n}")
    return HeavyJpegDataset(written_once(folder, n, HEAVY_SIDE, write_heavy_images))
