#!/usr/bin/env python3
"""Writes the seeds of fuzz_jpeg, fuzz_png and fuzz_webp into OUT/jpeg, OUT/png and OUT/webp: small crops of real
photographs (scikit-image's) encoded by libjpeg-turbo's cjpeg (baseline, progressive,
grayscale, restart markers, each subsampling, arithmetic coding) and PIL (CMYK JPEG; PNG RGB,
palette, gray, 1-bit, gray+alpha, RGBA, interlaced, 16-bit; WebP lossy, lossless, alpha). fuzz/check.sh runs it into
build-fuzz/seeds before the replay; nothing of it is committed.
Usage: fuzz/make_image_seeds.py OUT"""
import importlib.util
import io
import os
import subprocess
import sys

from PIL import Image


def main(out):
    data = os.path.join(importlib.util.find_spec("skimage").submodule_search_locations[0], "data")
    cat = Image.open(os.path.join(data, "chelsea.png")).convert("RGB").crop((150, 60, 182, 84))
    os.makedirs(os.path.join(out, "jpeg"), exist_ok=True)
    os.makedirs(os.path.join(out, "png"), exist_ok=True)
    ppm = io.BytesIO()
    cat.save(ppm, format="PPM")
    variants = {"baseline": ["-quality", "75"], "q95_444": ["-quality", "95", "-sample", "1x1"],
                "progressive": ["-progressive"], "gray": ["-grayscale"],
                "restart": ["-restart", "1", "-sample", "2x1"], "arithmetic": ["-arithmetic"],
                "optimize": ["-optimize", "-sample", "1x2"]}
    for name, args in variants.items():
        jpg = subprocess.run(["cjpeg", *args], input=ppm.getvalue(), stdout=subprocess.PIPE,
                             check=True).stdout
        open(os.path.join(out, "jpeg", name + ".jpg"), "wb").write(jpg)
    cat.convert("CMYK").save(os.path.join(out, "jpeg", "cmyk.jpg"), quality=80)
    png = os.path.join(out, "png")
    cat.save(os.path.join(png, "rgb.png"))
    cat.quantize(16).save(os.path.join(png, "palette.png"), transparency=2, bits=4)
    cat.convert("L").save(os.path.join(png, "gray.png"))
    cat.convert("1").save(os.path.join(png, "bits1.png"))
    cat.convert("LA").save(os.path.join(png, "gray_alpha.png"))
    cat.convert("RGBA").save(os.path.join(png, "rgba.png"))
    cat.save(os.path.join(png, "interlaced.png"), interlace=1)
    cat.convert("I;16").save(os.path.join(png, "gray16.png"))
    webp = os.path.join(out, "webp")
    os.makedirs(webp, exist_ok=True)
    cat.save(os.path.join(webp, "lossy.webp"), "WEBP", quality=70)
    cat.save(os.path.join(webp, "lossless.webp"), "WEBP", lossless=True)
    cat.convert("RGBA").save(os.path.join(webp, "alpha.webp"), "WEBP", quality=70)


if __name__ == "__main__":
    main(sys.argv[1])
