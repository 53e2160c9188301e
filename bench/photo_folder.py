#!/usr/bin/env python3
"""Writes an ImageNet-like folder of real JPEG photographs for bench/compare_loader.sh: the colour
photos scikit-image's wheel ships (astronaut, chelsea the cat, coffee, rocket, the Hubble deep
field, a motorcycle, a retina, a stained tissue), one class each, cut at random places and sizes
and resized to ImageNet's typical sizes (about 500x375, landscape or portrait, +-10%), written by
PIL (libjpeg-turbo) at quality 90 with 4:2:0 subsampling, as ImageNet's JPEGs mostly are.
Nothing here is committed: the folder is made in a temporary directory on each run.

With --side S the sizes are about S x 3S/4 instead (small JPEGs for bench/loader_scale.sh), and
with --distinct K only K crops are encoded, each written again under the following files' names
(a 100k-image folder in a minute; the loader indexes and decodes each file all the same).

Usage: photo_folder.py OUT [--images N] [--seed S] [--side S] [--distinct K]
"""
import argparse
import importlib.util
import os
import random

from PIL import Image

PHOTOS = {"astronaut": "astronaut.png", "cat": "chelsea.png", "coffee": "coffee.png",
          "rocket": "rocket.jpg", "hubble": "hubble_deep_field.jpg",
          "motorcycle": "motorcycle_left.png", "retina": "retina.jpg", "tissue": "ihc.png"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--side", type=int, default=500, help="the long side, about")
    p.add_argument("--distinct", type=int, default=0, help="crops encoded (0: every image)")
    a = p.parse_args()
    spec = importlib.util.find_spec("skimage")
    if spec is None:
        raise SystemExit("photo_folder.py: scikit-image is not installed (scripts/requirements.txt)")
    data = os.path.join(spec.submodule_search_locations[0], "data")
    rng = random.Random(a.seed)
    photos = {}
    for cls, name in sorted(PHOTOS.items()):
        with Image.open(os.path.join(data, name)) as im:
            photos[cls] = im.convert("RGB")
        os.makedirs(os.path.join(a.out, cls), exist_ok=True)
    classes = sorted(photos)
    encoded = []  # with --distinct: the bytes of the first K images
    for k in range(a.images):
        cls = classes[k % len(classes)]
        path = os.path.join(a.out, cls, f"{cls}_{k:06d}.jpg")
        if a.distinct and len(encoded) == a.distinct:
            with open(path, "wb") as f:
                f.write(encoded[k % a.distinct])
            continue
        im = photos[cls]
        # A random window of 40-100% of the photo's side, then ImageNet's size.
        f = rng.uniform(0.4, 1.0)
        w, h = max(16, int(im.width * f)), max(16, int(im.height * f))
        x, y = rng.randint(0, im.width - w), rng.randint(0, im.height - h)
        long_side = max(8, int(a.side * rng.uniform(0.9, 1.1)))
        short_side = max(8, int(a.side * 3 / 4 * rng.uniform(0.9, 1.1)))
        size = (long_side, short_side) if rng.random() < 0.75 else (short_side, long_side)
        out = im.crop((x, y, x + w, y + h)).resize(size, Image.BICUBIC)
        out.save(path, quality=90, subsampling=2)
        if a.distinct:
            with open(path, "rb") as f:
                encoded.append(f.read())


if __name__ == "__main__":
    main()
