#!/usr/bin/env python3
"""Writes the seeds of fuzz_gzip and fuzz_archive (fuzz/corpus/gzip, fuzz/corpus/archive) with
Python's own gzip and tarfile writers, small so that each fuzz run stays fast.
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
