#!/usr/bin/env python3
"""Makes the image tests' fixtures in OUT (a temporary folder) from real photographs: the ones
scikit-image's wheel ships (skimage/data: astronaut, chelsea the cat, coffee, rocket, camera, ...),
cut into crops and re-encoded by real encoders: libjpeg-turbo's cjpeg (qualities, subsamplings,
progressive, grayscale), PIL (CMYK JPEG; PNG palette, gray, gray+alpha, RGBA, interlaced; WebP
lossy, lossless and with alpha) and zlib for a 16-bit RGB PNG. Nothing here is committed; it takes about a second.

Usage: make_image_fixture.py OUT [--per_class N]
Writes
  OUT/formats/NAME.{jpg,png,webp} with OUT/formats/NAME.rgb (the reference RGB bytes: PIL's
      convert("RGB"), the high byte for 16-bit PNGs) and OUT/formats/manifest.tsv
      (name, file, width, height, what)
  OUT/bad/*: truncated, corrupt, empty, not-an-image and 100000x100000-header files
  OUT/folder/<class>/...: one class per photograph, crops of random size and place, JPEG at
      several qualities and subsamplings and some PNG, nested folders and upper-case extensions
"""
import argparse
import importlib.util
import io
import os
import random
import struct
import subprocess
import zlib

import numpy as np
from PIL import Image


def skimage_data():
    spec = importlib.util.find_spec("skimage")
    if spec is None:
        raise SystemExit("make_image_fixture: scikit-image is not installed (scripts/requirements.txt)")
    return os.path.join(spec.submodule_search_locations[0], "data")


def photo(name):
    with Image.open(os.path.join(skimage_data(), name)) as im:
        return im.convert("RGB") if im.mode not in ("RGB", "L") else im.copy()


def cjpeg(image, path, *args):
    """Encodes a PIL image with libjpeg-turbo's cjpeg (from a PPM/PGM on stdin)."""
    ppm = io.BytesIO()
    image.save(ppm, format="PPM")
    data = subprocess.run(["cjpeg", *args], input=ppm.getvalue(), stdout=subprocess.PIPE,
                          check=True).stdout
    with open(path, "wb") as f:
        f.write(data)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16_rgb(array16, path):
    """A 16-bit RGB PNG (PIL cannot write one): IHDR, one zlib IDAT, IEND."""
    h, w, _ = array16.shape
    raw = b"".join(b"\0" + array16[y].astype(">u2").tobytes() for y in range(h))
    data = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(raw, 6)) + png_chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


def formats(out):
    folder = os.path.join(out, "formats")
    os.makedirs(folder)
    rows = []
    cat = photo("chelsea.png").crop((100, 40, 100 + 173, 40 + 131))  # odd sizes on purpose
    gray = photo("camera.png").crop((150, 60, 150 + 97, 60 + 121))

    def add(name, path, what, reference=None):
        with Image.open(path) as im:
            ref = reference if reference is not None else np.asarray(im.convert("RGB"))
        ref = np.ascontiguousarray(ref, dtype=np.uint8)
        ref.tofile(os.path.join(folder, name + ".rgb"))
        rows.append(f"{name}\t{os.path.basename(path)}\t{ref.shape[1]}\t{ref.shape[0]}\t{what}")

    for q, sample in [(95, "1x1"), (90, "2x2"), (75, "2x1"), (50, "1x2"), (30, "2x2")]:
        name = f"cjpeg_q{q}_{sample}"
        cjpeg(cat, os.path.join(folder, name + ".jpg"), "-quality", str(q), "-sample", sample)
        add(name, os.path.join(folder, name + ".jpg"), f"cjpeg quality {q}, sampling {sample}")
    cjpeg(cat, os.path.join(folder, "cjpeg_progressive.jpg"), "-quality", "85", "-progressive")
    add("cjpeg_progressive", os.path.join(folder, "cjpeg_progressive.jpg"), "cjpeg progressive")
    cjpeg(cat, os.path.join(folder, "cjpeg_optimize_restart.jpg"), "-optimize", "-restart", "2")
    add("cjpeg_optimize_restart", os.path.join(folder, "cjpeg_optimize_restart.jpg"),
        "cjpeg optimised Huffman tables, restart markers")
    cjpeg(cat, os.path.join(folder, "cjpeg_grayscale.jpg"), "-grayscale")
    add("cjpeg_grayscale", os.path.join(folder, "cjpeg_grayscale.jpg"), "cjpeg -grayscale")
    cjpeg(gray, os.path.join(folder, "cjpeg_gray_input.jpg"), "-quality", "80")
    add("cjpeg_gray_input", os.path.join(folder, "cjpeg_gray_input.jpg"), "cjpeg of a gray photo")
    cat.convert("CMYK").save(os.path.join(folder, "pil_cmyk.jpg"), quality=90)
    add("pil_cmyk", os.path.join(folder, "pil_cmyk.jpg"), "PIL CMYK JPEG (Adobe, inverted)")
    rocket = os.path.join(skimage_data(), "rocket.jpg")  # as shipped: a camera's own JPEG
    os.symlink(rocket, os.path.join(folder, "skimage_rocket.jpg"))
    add("skimage_rocket", os.path.join(folder, "skimage_rocket.jpg"),
        "scikit-image's rocket.jpg as shipped")

    cat.save(os.path.join(folder, "pil_rgb.png"))
    add("pil_rgb", os.path.join(folder, "pil_rgb.png"), "PIL RGB PNG")
    cat.quantize(colors=64).save(os.path.join(folder, "pil_palette.png"))
    add("pil_palette", os.path.join(folder, "pil_palette.png"), "PIL palette PNG (64 colours)")
    pal = cat.quantize(colors=16)
    pal.save(os.path.join(folder, "pil_palette_trns.png"), transparency=3, bits=4)
    add("pil_palette_trns", os.path.join(folder, "pil_palette_trns.png"),
        "PIL 4-bit palette PNG with a transparent entry")
    gray.save(os.path.join(folder, "pil_gray.png"))
    add("pil_gray", os.path.join(folder, "pil_gray.png"), "PIL gray PNG")
    gray.point(lambda v: 255 if v > 100 else 0).convert("1").save(os.path.join(folder, "pil_1bit.png"))
    add("pil_1bit", os.path.join(folder, "pil_1bit.png"), "PIL 1-bit PNG")
    la = Image.merge("LA", (gray, gray.point(lambda v: 255 - v)))
    la.save(os.path.join(folder, "pil_gray_alpha.png"))
    add("pil_gray_alpha", os.path.join(folder, "pil_gray_alpha.png"), "PIL gray+alpha PNG")
    rgba = cat.copy()
    rgba.putalpha(cat.convert("L"))
    rgba.save(os.path.join(folder, "pil_rgba.png"))
    add("pil_rgba", os.path.join(folder, "pil_rgba.png"), "PIL RGBA PNG (alpha dropped)")
    cat.save(os.path.join(folder, "pil_interlaced.png"), interlace=1)
    add("pil_interlaced", os.path.join(folder, "pil_interlaced.png"), "PIL Adam7 interlaced PNG")
    g16 = (np.asarray(gray).astype(np.uint16) * 257 + 3)
    Image.fromarray(g16).save(os.path.join(folder, "pil_gray16.png"))
    add("pil_gray16", os.path.join(folder, "pil_gray16.png"), "PIL 16-bit gray PNG (high byte)",
        reference=np.repeat((g16 >> 8).astype(np.uint8)[:, :, None], 3, axis=2))
    c16 = np.asarray(cat).astype(np.uint16) * 257 + 7
    png16_rgb(c16, os.path.join(folder, "zlib_rgb16.png"))
    add("zlib_rgb16", os.path.join(folder, "zlib_rgb16.png"), "16-bit RGB PNG (high byte)",
        reference=(c16 >> 8).astype(np.uint8))
    # WebP by PIL's libwebp (its reference is PIL's own decode, as for every file here).
    cat.save(os.path.join(folder, "pil_lossy.webp"), "WEBP", quality=80)
    add("pil_lossy", os.path.join(folder, "pil_lossy.webp"), "PIL lossy WebP (quality 80)")
    cat.save(os.path.join(folder, "pil_lossless.webp"), "WEBP", lossless=True)
    add("pil_lossless", os.path.join(folder, "pil_lossless.webp"), "PIL lossless WebP")
    rgba.save(os.path.join(folder, "pil_alpha.webp"), "WEBP", quality=90)
    add("pil_alpha", os.path.join(folder, "pil_alpha.webp"), "PIL lossy WebP with alpha (dropped)")
    with open(os.path.join(folder, "manifest.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")


def bad(out):
    folder = os.path.join(out, "bad")
    os.makedirs(folder)
    cat = photo("chelsea.png").crop((0, 0, 160, 120))
    good_jpg = os.path.join(folder, "good.jpg")
    cjpeg(cat, good_jpg, "-quality", "85")
    jpg = open(good_jpg, "rb").read()
    os.remove(good_jpg)
    png_io = io.BytesIO()
    cat.save(png_io, format="PNG")
    png = png_io.getvalue()
    webp_io = io.BytesIO()
    cat.save(webp_io, format="WEBP", quality=85)
    webp = webp_io.getvalue()

    def write(name, data):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)

    write("truncated.jpg", jpg[: len(jpg) // 2])
    write("truncated_header.jpg", jpg[:40])
    write("truncated.png", png[: len(png) // 2])
    write("truncated.webp", webp[: len(webp) // 2])
    write("empty.jpg", b"")
    write("text.jpg", b"this is not an image\n" * 4)
    corrupt = bytearray(png)
    corrupt[png.index(b"IDAT") + 100] ^= 0xFF  # inside IDAT: the CRC no longer matches
    write("bad_crc.png", bytes(corrupt))
    # Headers claiming 100000x100000 (PNG's IHDR) and 60000x60000 (JPEG's SOF0, whose fields
    # stop at 65535) of real files.
    sof = jpg.index(b"\xff\xc0")
    write("huge.jpg", jpg[: sof + 5] + struct.pack(">HH", 60000, 60000) + jpg[sof + 9:])
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    write("huge.png", png[:8] + png_chunk(b"IHDR", ihdr) + png[8 + 25:])
    write("gif.jpg", b"GIF89a" + bytes(20))


def folder(out, per_class, seed):
    rng = random.Random(seed)
    root = os.path.join(out, "folder")
    photos = {"astronaut": "astronaut.png", "cat": "chelsea.png", "coffee": "coffee.png",
              "rocket": "rocket.jpg"}
    for index, (cls, name) in enumerate(sorted(photos.items())):
        im = photo(name)
        for k in range(per_class):
            side = rng.randint(48, 120)
            w, h = side + rng.randint(-16, 24), side
            x, y = rng.randint(0, im.width - w), rng.randint(0, im.height - h)
            crop = im.crop((x, y, x + w, y + h))
            sub = os.path.join(root, cls, "nested") if k % 5 == 4 else os.path.join(root, cls)
            os.makedirs(sub, exist_ok=True)
            if k % 7 == 3:
                crop.save(os.path.join(sub, f"{cls}_{k:03d}.png"))
            else:
                ext = ".JPG" if k % 6 == 1 else ".jpg"
                q = [95, 85, 75, 60][k % 4]
                args = ["-quality", str(q), "-sample", ["2x2", "1x1", "2x1"][k % 3]]
                if k % 8 == 5:
                    args.append("-progressive")
                cjpeg(crop, os.path.join(sub, f"{cls}_{k:03d}{ext}"), *args)
        with open(os.path.join(root, cls, "notes.txt"), "w") as f:  # not an image: skipped
            f.write("not an image\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--per_class", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=["formats", "bad", "folder"], action="append")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for part in a.only or ["formats", "bad", "folder"]:
        if part == "formats":
            formats(a.out)
        elif part == "bad":
            bad(a.out)
        else:
            folder(a.out, a.per_class, a.seed)


if __name__ == "__main__":
    main()
