#!/usr/bin/env python3
"""The PyTorch peer of `ddpx bench loader`: torchvision's ImageFolder (PIL decoding) with
RandomResizedCrop(224), RandomHorizontalFlip, ToTensor and Normalize(ImageNet), through a
DataLoader of --workers processes (shuffled, batch --batch_size), no model. Prints one JSON line
with the fields of ddpx's --json: images/s over the timed batches, CPU time an image (this process
and its workers), the time from process start to the first batch (split into the start-up,
importing torch and torchvision, and the loader's part: ImageFolder's scan, the workers' start
and the first batch) with the CPU seconds of this process and its workers until then, the
ImageFolder scan, and
memory: the peak resident sets of this process and its workers summed, and their proportional
sets (PSS, shared pages divided among the processes) at the end.

Run with the torch ddpx was built against: .venv/bin/python bench/pytorch_loader.py --help
"""
import argparse
import json
import os
import time

import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder


def process_age_seconds():
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pids):
    """User + system time of these processes, from /proc (clock ticks)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batches", type=int, default=0, help="timed batches (0: the rest of one epoch)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="")
    a = p.parse_args()
    startup_s = process_age_seconds()  # the interpreter's start and the imports
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    transform = T.Compose([T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    start = time.perf_counter()
    dataset = ImageFolder(a.data_dir, transform=transform)
    index_s = time.perf_counter() - start
    loader = DataLoader(dataset, batch_size=a.batch_size, shuffle=True, num_workers=a.workers)
    available = len(loader)
    timed = a.batches if a.batches > 0 else available - a.warmup
    if timed < 1 or a.warmup + timed > available:
        raise SystemExit(f"pytorch_loader.py: {available} batches of {a.batch_size} in {a.data_dir}: "
                         f"too few for {a.warmup} warmup and {timed} timed batches")
    it = iter(loader)
    next(it)
    first_batch_s = process_age_seconds()
    loader_first_batch_s = time.perf_counter() - start
    first_batch_cpu_s = cpu_seconds([os.getpid()] + [w.pid for w in getattr(it, "_workers", [])])
    for _ in range(a.warmup - 1):
        next(it)
    pids = [os.getpid()] + [w.pid for w in getattr(it, "_workers", [])]
    cpu0 = cpu_seconds(pids)
    t0 = time.perf_counter()
    images = 0
    for _ in range(timed):
        x, _ = next(it)
        assert x.shape[1:] == (3, a.image_size, a.image_size), x.shape
        images += x.shape[0]
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(pids) - cpu0
    peak_rss = sum(status_kib(pid, "VmHWM") for pid in pids) / 1024
    pss = sum(pss_kib(pid) for pid in pids) / 1024
    line = {"dataset": "imagefolder", "images": len(dataset), "workers": a.workers,
            "batch_size": a.batch_size, "image_size": a.image_size, "timed_images": images,
            "images_per_sec": images / seconds, "cpu_ms_per_image": 1000 * cpu / images,
            "first_batch_s": first_batch_s, "startup_s": startup_s,
            "loader_first_batch_s": loader_first_batch_s, "first_batch_cpu_s": first_batch_cpu_s,
            "index_s": index_s, "peak_rss_mib": peak_rss,
            "pss_mib": pss, "processes": len(pids)}
    print(json.dumps(line))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(line) + "\n")
    del it


if __name__ == "__main__":
    main()
