#!/usr/bin/env python3
"""The PyTorch peer of `ddpx bench train`: the same workload through torchvision's model,
PyTorch's DistributedDataParallel (gloo) and its DataLoader, started as torchrun would start it
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment). Prints one JSON line on rank 0
with the same fields as ddpx's --json. With --fsdp: FSDP2's fully_shard instead of DDP. With
--pipeline P (a ResNet, world size P): torch.distributed.pipelining's ScheduleGPipe,
Schedule1F1B or ScheduleInterleaved1F1B (--stages_per_rank V stages a rank) over the stem, the
residual blocks and the head cut at --pipeline_cut, as ddpx's pipeline cuts them.
With --data imagefolder --data_dir DIR: torchvision's ImageFolder (PIL) with RandomResizedCrop,
flip and ImageNet normalisation through the DataLoader's worker processes
(bench/compare_image_train.sh). data_wait_ms: the time a timed step blocked in next() for its
batch.

Run with the torch ddpx was built against: .venv/bin/python bench/pytorch_train.py --help
"""
import argparse
import resource
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
import torchvision.transforms as T


def process_age_seconds():
    """Seconds since this process started (imports included), from /proc."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class ImageDataset(Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i]).permute(2, 0, 1)  # (C, H, W) uint8
        return self.transform(x), int(self.labels[i])


def pipeline_activations(schedule, model, rank, stages, batch, opt):
    """One more pipeline step, the tensors its forwards save for backward counted while they are
    held (autograd's saved-tensor hooks: a storage from its first save to its last use in
    backward; the parameters and the batch left out): the most this rank held at once, the
    largest over the ranks, in MiB."""
    x, y = batch
    before = {t.untyped_storage().data_ptr() for t in (x, y)}
    before |= {p.untyped_storage().data_ptr() for p in model.parameters()}
    uses, size = {}, {}
    held = [0, 0]  # now, most

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in before:
            if uses.get(key, 0) == 0:
                size[key] = t.untyped_storage().nbytes()
                held[0] += size[key]
                held[1] = max(held[1], held[0])
            uses[key] = uses.get(key, 0) + 1
        return (key, t)

    def unpack(saved):
        key, t = saved
        if key in uses:
            uses[key] -= 1
            if uses[key] == 0:
                del uses[key]
                held[0] -= size[key]
        return t

    opt.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        if rank == 0:
            schedule.step(x)
        elif rank == stages - 1:
            schedule.step(target=y, losses=[])
        else:
            schedule.step()
    most = torch.tensor([float(held[1])])
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    return most.item() / 2**20


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="synthetic", choices=["synthetic", "fashion-mnist", "imagefolder"])
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist",
                   help="fashion-mnist's files, or imagefolder's DIR/<class>/*.jpg")
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes")
    p.add_argument("--no_augment", action="store_true")
    p.add_argument("--json", default="")
    p.add_argument("--model", default="resnet18", help="a torchvision model name")
    p.add_argument("--stem", default="imagenet", choices=["imagenet", "cifar"])
    p.add_argument("--num_classes", type=int, default=10, help="synthetic data")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"])
    p.add_argument("--channels_last", action="store_true")
    p.add_argument("--fsdp", action="store_true",
                   help="FSDP2: fully_shard each residual block, then the model (torchtitan's way)")
    p.add_argument("--powersgd", type=int, default=0,
                   help="DDP with powerSGD_hook at this matrix approximation rank (0: plain DDP)")
    p.add_argument("--powersgd_start_iter", type=int, default=2,
                   help="powerSGD_hook's start_powerSGD_iter (more than 1, as PyTorch requires)")
    p.add_argument("--pipeline", type=int, default=1,
                   help="pipeline stages (the world size; a ResNet): torch.distributed.pipelining")
    p.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved"])
    p.add_argument("--stages_per_rank", type=int, default=2,
                   help="with --schedule interleaved: stages a rank (rank r holds r, r+P, ...)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--pipeline_cut", default="",
                   help="first layer of each stage, then the layer count: 0,8,10 (stem, blocks, head)")
    a = p.parse_args()
    per_rank = a.stages_per_rank if a.schedule == "interleaved" else 1
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)

    # Every step of the run in one epoch on every rank, as ddpx's bench train: no epoch ends
    # (and no DataLoader restarts) inside the timed window.
    n = a.batch_size * world * (a.warmup + a.steps + 1)
    if a.data == "imagefolder":
        # torchvision's ImageFolder (PIL decoding in the DataLoader's worker processes) with
        # ImageNet's training transform at --image_size: the peer of ddpx's streamed folders.
        from torchvision.datasets import ImageFolder
        dataset = ImageFolder(a.data_dir, transform=T.Compose([
            T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    elif a.data == "synthetic":
        g = np.random.default_rng(0)
        images = g.integers(0, 256, size=(n, a.image_size, a.image_size, 3), dtype=np.uint8)
        labels = g.integers(0, a.num_classes, size=n)
    else:
        images = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"))[..., None]
        labels = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    if a.data != "imagefolder":
        ops = [T.ConvertImageDtype(torch.float32)]
        if images.shape[-1] == 1:
            ops.append(T.Lambda(lambda x: x.expand(3, -1, -1)))
        if images.shape[1] != a.image_size:
            ops.append(T.Resize(a.image_size, antialias=False))
        if not a.no_augment:
            ops += [T.RandomCrop(a.image_size, padding=4), T.RandomHorizontalFlip()]
        ops.append(T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
        dataset = ImageDataset(images, labels, T.Compose(ops))
    # A pipeline's stages all read the one replica's batches.
    sampler = DistributedSampler(dataset, world, rank) if world > 1 and a.pipeline == 1 else None
    loader = DataLoader(dataset, batch_size=a.batch_size, sampler=sampler,
                        shuffle=sampler is None, drop_last=True, num_workers=a.workers,
                        persistent_workers=a.workers > 0, pin_memory=device.type == "cuda")

    torch.manual_seed(0)
    classes = {"synthetic": a.num_classes, "fashion-mnist": 10}.get(a.data) or len(dataset.classes)
    model = getattr(torchvision.models, a.model)(num_classes=classes)
    if a.stem == "cifar":  # 3x3 stride-1 stem, no max-pool (ddpx's --stem cifar)
        model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        model.maxpool = torch.nn.Identity()
    model = model.to(device, memory_format=torch.channels_last if a.channels_last else torch.contiguous_format)
    stage_schedule = None
    powersgd_state = None
    if a.pipeline > 1:
        from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                                  ScheduleInterleaved1F1B)
        layers = [torch.nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)]
        layers += [b for l in (model.layer1, model.layer2, model.layer3, model.layer4) for b in l]
        layers.append(torch.nn.Sequential(model.avgpool, torch.nn.Flatten(1), model.fc))
        bounds = [int(b) for b in a.pipeline_cut.split(",")]
        stages = a.pipeline * per_rank
        assert world == a.pipeline and len(bounds) == stages + 1 and bounds[-1] == len(layers), \
            f"--pipeline_cut {a.pipeline_cut}: {stages + 1} bounds ending at {len(layers)} layers"
        # Rank r holds stages r, r + P, ... (the loop order ddpx's interleaved schedule uses).
        mine = [torch.nn.Sequential(*layers[bounds[s]:bounds[s + 1]])
                for s in range(rank, stages, a.pipeline)]
        model = torch.nn.ModuleList(mine)
        pipe = [PipelineStage(m, s, stages, device)
                for m, s in zip(mine, range(rank, stages, a.pipeline))]
        if a.schedule == "interleaved":
            stage_schedule = ScheduleInterleaved1F1B(pipe, n_microbatches=a.microbatches,
                                                     loss_fn=F.cross_entropy)
        else:
            kind = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
            stage_schedule = kind(pipe[0], n_microbatches=a.microbatches, loss_fn=F.cross_entropy)
    elif world > 1 and a.fsdp:
        from torch.distributed.fsdp import fully_shard
        from torchvision.models.resnet import BasicBlock, Bottleneck
        for m in model.modules():
            if isinstance(m, (BasicBlock, Bottleneck)):
                fully_shard(m)
        fully_shard(model)
    elif world > 1:
        ddp_args = {}
        if a.powersgd > 0:
            # powerSGD_hook issues its later all-reduces from future callbacks; over Gloo with
            # two or more buckets the ranks then issue them in different orders ("Received data
            # size doesn't match expected size", PyTorch 2.11, 2026-11-27). One bucket keeps the
            # order.
            dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
            ddp_args["bucket_cap_mb"] = 1 << 20
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, **ddp_args)
        if a.powersgd > 0:
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
            powersgd_state = powerSGD.PowerSGDState(
                process_group=None, matrix_approximation_rank=a.powersgd,
                start_powerSGD_iter=a.powersgd_start_iter)
            model.register_comm_hook(powersgd_state, powerSGD.powerSGD_hook)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4,
                          fused=device.type == "cuda")
    model.train()

    def batches():
        epoch = 0
        while True:
            if sampler is not None:
                sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    it = batches()
    first_step = None
    data_wait = 0.0  # over the timed steps: this rank blocked in next() for its batch
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            if world > 1:
                dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
        waited = time.perf_counter()
        x, y = next(it)
        if i >= a.warmup:
            data_wait += time.perf_counter() - waited
        x = x.to(device, non_blocking=True)
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = y.to(device, non_blocking=True)
        if first_step is None:
            first_step = process_age_seconds()
        opt.zero_grad()
        if stage_schedule is not None:
            if rank == 0:
                stage_schedule.step(x)
            elif rank == a.pipeline - 1:
                stage_schedule.step(target=y, losses=[])
            else:
                stage_schedule.step()
        else:
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.time() - t0
    activation_mib = None
    if stage_schedule is not None:
        activation_mib = pipeline_activations(stage_schedule, model, rank, a.pipeline, next(it), opt)
    ips = a.steps * a.batch_size * (world // a.pipeline) / elapsed
    if rank == 0:
        line = {"peer": "pytorch", "world_size": world, "batch_size": a.batch_size,
                "threads": a.threads, "workers": a.workers, "sync": "window ends",
                "images_per_sec": ips, "step_ms": 1e3 * elapsed / a.steps,
                "data_wait_ms": 1e3 * data_wait / a.steps,
                "startup_s": first_step,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "fsdp": a.fsdp, "pipeline": a.pipeline}
        if activation_mib is not None:  # the most over the stages' ranks
            line["activation_mib"] = activation_mib
        if powersgd_state is not None:
            # The elements sent over those before compression, counted by the hook itself.
            line["powersgd_ratio"] = float(powersgd_state.compression_stats()[0])
        print(json.dumps(line), flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(line) + "\n")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
