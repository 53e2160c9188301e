#!/usr/bin/env python3
"""The PyTorch peer of bench/powersgd_accuracy.sh: torchvision's ResNet-18 trained on
Fashion-MNIST by PyTorch's DistributedDataParallel (gloo) on 2 processes, once plainly averaged
and once with torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook (rank 2 from step 100),
the same batch, optimizer and schedule as the ddpx runs; prints each epoch's test accuracy and
the gap at the end. What it answers: whether PyTorch's own hook loses as much accuracy as ddpx's
in the same few epochs.

The data: the gzipped IDX files of Debian's dataset-fashion-mnist, 28x28 grey images repeated
into 3 channels and normalized; random crops (4 px padding) and flips, as ddpx's defaults.
One bucket (bucket_cap_mb 1000): PyTorch's hook over gloo fails with more than one
(docs/performance.md, "PowerSGD beside PyTorch's powerSGD_hook").

Usage: .venv/bin/python bench/pytorch_powersgd_accuracy.py [--epochs 5] [--hook both]
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import read_idx  # noqa: E402  (the IDX reader of the throughput peer)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = torch.from_numpy(read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")).copy())
    y = torch.from_numpy(read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")).copy())
    x = (x.float() / 255.0 - 0.2860) / 0.3530
    return x.unsqueeze(1).expand(-1, 3, -1, -1).contiguous(), y.long()


def augment(x, generator):
    n = x.size(0)
    padded = F.pad(x, (4, 4, 4, 4))
    i = torch.randint(0, 9, (n,), generator=generator)
    j = torch.randint(0, 9, (n,), generator=generator)
    out = torch.stack([padded[k, :, i[k]:i[k] + 28, j[k]:j[k] + 28] for k in range(n)])
    flip = torch.rand(n, generator=generator) < 0.5
    out[flip] = out[flip].flip(3)
    return out


def worker(rank, args, port, hook, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(args.seed)
    model = torchvision.models.resnet18(num_classes=10)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1000)
    if hook == "powersgd":
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                       start_powerSGD_iter=args.start, warm_start=True,
                                       use_error_feedback=True)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    x, y = load(args.data_dir, "train")
    tx, ty = load(args.data_dir, "test")
    steps_per_epoch = len(y) // (2 * args.batch_size)
    total = steps_per_epoch * args.epochs
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)
    g = torch.Generator().manual_seed(args.seed + 1 + rank)
    accuracies = []
    for epoch in range(args.epochs):
        start = time.time()
        ddp.train()
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(args.seed + epoch))
        for s in range(steps_per_epoch):
            idx = order[(2 * s + rank) * args.batch_size:(2 * s + rank + 1) * args.batch_size]
            loss = F.cross_entropy(ddp(augment(x[idx], g)), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for k in range(0, len(ty), 1000):
                correct += (model(tx[k:k + 1000]).argmax(1) == ty[k:k + 1000]).sum().item()
        accuracies.append((correct / len(ty), time.time() - start))
    if rank == 0:
        results[hook] = accuracies
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=128, help="a rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--rank", type=int, default=2)
    p.add_argument("--start", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hook", default="both", choices=["both", "allreduce", "powersgd"])
    args = p.parse_args()
    hooks = ["allreduce", "powersgd"] if args.hook == "both" else [args.hook]
    results = mp.Manager().dict()
    for n, hook in enumerate(hooks):
        mp.spawn(worker, args=(args, 29500 + 17 * n + os.getpid() % 1000, hook, results), nprocs=2)
    print(f"# torchvision resnet18 on Fashion-MNIST, PyTorch DDP (gloo) 2 ranks x batch "
          f"{args.batch_size}, SGD momentum 0.9, lr {args.lr} cosine, {args.epochs} epochs; "
          f"powerSGD_hook rank {args.rank} from step {args.start}")
    print("# epoch " + " ".join(f"{h:>10}" for h in hooks))
    for e in range(args.epochs):
        print(f"  {e:>5} " + " ".join(f"{results[h][e][0]:10.4f}" for h in hooks))
    if len(hooks) == 2:
        gap = (results["allreduce"][-1][0] - results["powersgd"][-1][0]) * 100
        print(f"# final: allreduce {results['allreduce'][-1][0]:.4f}, powerSGD_hook "
              f"{results['powersgd'][-1][0]:.4f} ({gap:+.2f} points behind)")


if __name__ == "__main__":
    main()
