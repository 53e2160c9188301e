#!/usr/bin/env python3
"""Writes the seeds of fuzz_gzip, fuzz_archive and fuzz_safetensors (fuzz/corpus/gzip, archive,
safetensors) with Python's own gzip and tarfile writers and the safetensors package, small so that
each fuzz run stays fast.
Usage: /work/main/.venv/bin/python fuzz/make_io_seeds.py  (rewrites the seed files in place)"""
import gzip
import io
import os
import tarfile

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(here, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def gz(data, **kw):
    # mtime=0: the same bytes on every run.
    return gzip.compress(data, mtime=0, **kw)


idx_header = bytes([0, 0, 8, 1, 0, 0, 0, 4])
write("gzip", "empty.gz", gz(b""))
write("gzip", "idx_labels.gz", gz(idx_header + bytes([3, 1, 4, 1])))
write("gzip", "text_level1.gz", gz(b"ddpx " * 40, compresslevel=1))
write("gzip", "two_members.gz", gz(b"first member\n") + gz(b"second member\n"))
named = io.BytesIO()
with gzip.GzipFile(filename="t10k-labels-idx1-ubyte", mode="wb", fileobj=named, mtime=0) as f:
    f.write(idx_header + bytes(4))
write("gzip", "with_name.gz", named.getvalue())


def tar(entries, mode):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode, format=tarfile.USTAR_FORMAT) as t:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                t.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return out.getvalue()


# The layout of CIFAR's archives: a folder with batch files and a meta file.
cifar = [
    ("cifar-10-batches-bin", "dir", None),
    ("cifar-10-batches-bin/batches.meta.txt", "file", b"airplane\nautomobile\n"),
    ("cifar-10-batches-bin/test_batch.bin", "file", bytes([1]) + bytes(range(64))),
]
write("archive", "cifar_layout.tar.gz", gz(tar(cifar, "w")))
write("archive", "cifar_layout.tar", tar(cifar, "w"))
write("archive", "dot_slash.tar.gz", gz(tar([("./a/b.txt", "file", b"b\n")], "w")))
# Entries the reader must refuse: a link and a path that climbs out.
write("archive", "symlink.tar.gz", gz(tar([("link", "link", "/etc/passwd")], "w")))
write("archive", "dotdot.tar.gz", gz(tar([("../escape.txt", "file", b"x\n")], "w")))


# safetensors: files the real library writes (every dtype ddpx reads, metadata, a header that
# pads, no tensors at all) and two that lie (an overlap, a dtype ddpx does not hold).
import json
import struct

import torch
from safetensors.torch import save

write("safetensors", "dtypes.safetensors", save({
    "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "f16": torch.arange(3, dtype=torch.float16),
    "bf16": torch.arange(2, dtype=torch.bfloat16),
    "f64": torch.arange(2, dtype=torch.float64),
    "i64": torch.arange(2, dtype=torch.int64),
    "i32": torch.arange(2, dtype=torch.int32),
    "i16": torch.arange(3, dtype=torch.int16),
    "i8": torch.arange(3, dtype=torch.int8),
    "u8": torch.arange(3, dtype=torch.uint8),
    "bool": torch.tensor([True, False]),
    "scalar": torch.tensor(1.5),
    "empty": torch.zeros(0, 2),
}))
write("safetensors", "gpt2_names.safetensors", save({
    "transformer.wte.weight": torch.ones(5, 4),
    "transformer.h.0.attn.c_attn.weight": torch.ones(4, 12),
    "transformer.h.0.attn.c_attn.bias": torch.zeros(12),
}, metadata={"format": "pt"}))
write("safetensors", "no_tensors.safetensors", save({}))


def raw(header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


write("safetensors", "lie_overlap.safetensors", raw({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
write("safetensors", "lie_fp8.safetensors", raw(
    {"a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, bytes(2)))
