"""The PyTorch peer of ddpx's --tensor_parallel (bench/compare_tensor_parallel.sh): DTensor tensor
parallelism (parallelize_module with ColwiseParallel and RowwiseParallel, as torchtitan splits a
transformer) on a ViT of torchvision's shape, on CPU over Gloo, one rank a process (started with
torchrun's environment). torchvision's ViT runs its attention through nn.MultiheadAttention's fused
in_proj, which DTensor cannot split by heads, so the blocks here hold q, k and v as three Linear
layers (torchtitan's wq, wk, wv) with the same sizes and arithmetic; the MLP and the rest are
torchvision's. With --sequence_parallel: torchtitan's sequence parallelism (SequenceParallel on
the LayerNorms, the residual stream sharded over tokens between the blocks, the row-parallel
layers reduce-scattering into it). Prints and appends (--json) images/s, the step time and rank
0's peak resident memory, the fields ddpx's `bench train --json` writes, and `activation_mib`:
the bytes of the tensors one more step's forward saves for its backward (autograd's saved-tensor
hooks, each storage once, the parameters and the batch left out): the activations, which
ddpx's `bench memory` counts at the allocator (what a forward adds and still holds when its
backward starts: the same tensors, and the logits and loss besides).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim) for _ in range(3))
        self.wo = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, self.heads, -1).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, -1)
        return self.wo(out)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.attention = Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Dropout(0.0),
                                 nn.Linear(mlp, dim), nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ContiguousGrad(torch.autograd.Function):
    """The identity, whose gradient is made contiguous: DTensor's full_tensor() backward views
    its gradient, which the head's token selection leaves strided."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


class ViT(nn.Module):
    def __init__(self, image, patch, layers, heads, dim, mlp, classes):
        super().__init__()
        self.patch = patch
        self.conv_proj = nn.Conv2d(3, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp) for _ in range(layers))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

        self.mesh = None  # set: sequence parallel over it between the blocks

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embedding
        if self.mesh is not None:  # each rank keeps its tokens (an uneven share is DTensor's)
            x = DTensor.from_local(x, self.mesh, [Replicate()]).redistribute(self.mesh, [Shard(1)])
        for block in self.blocks:
            x = block(x)
        if self.mesh is not None:
            x = ContiguousGrad.apply(x.full_tensor())
        return self.head(self.ln(x)[:, 0])


MODELS = {  # torchvision's (and ddpx's) shapes: image, patch, layers, heads, dim, mlp
    "vit_tiny_patch4_32": (32, 4, 6, 3, 192, 768),
    "vit_b_16": (224, 16, 12, 12, 768, 3072),
    "vit_b_32": (224, 32, 12, 12, 768, 3072),
}


def peak_rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="vit_tiny_patch4_32", choices=sorted(MODELS))
    p.add_argument("--image_size", type=int, default=0, help="0: the model's")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--num_classes", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sequence_parallel", action="store_true")
    p.add_argument("--json", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    image, patch, layers, heads, dim, mlp = MODELS[a.model]
    size = a.image_size or image
    torch.manual_seed(0)
    model = ViT(size, patch, layers, heads, dim, mlp, a.num_classes)
    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
                "mlp.0": ColwiseParallel(), "mlp.3": RowwiseParallel()}
        if a.sequence_parallel:  # torchtitan's: the stream stays a DTensor sharded over tokens
            gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                        use_local_output=True)
            plan.update({"ln_1": SequenceParallel(), "ln_2": SequenceParallel(),
                         "attention": gather, "mlp": gather,
                         "attention.wo": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
                         "mlp.3": RowwiseParallel(output_layouts=Shard(1), use_local_output=False)})
        parallelize_module(block, mesh, plan)
        block.attention.heads //= world  # this rank's heads
    if a.sequence_parallel:
        model.mesh = mesh
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch_size, 3, size, size, generator=g)
    y = torch.randint(a.num_classes, (a.batch_size,), generator=g)

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # the states stay allocated, as ddpx's do

    for _ in range(a.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    peak_rss = peak_rss_mib()
    # One more step, the forward's saved tensors counted (each storage once; the parameters and
    # the input batch, there before it, left out): the activations its backward will read.
    before = {t.untyped_storage().data_ptr() for t in (x, y)}
    for p in model.parameters():
        before.add((p._local_tensor if isinstance(p, DTensor) else p).untyped_storage().data_ptr())
    saved = {}

    def pack(t):
        local = t._local_tensor if isinstance(t, DTensor) else t
        storage = local.untyped_storage()
        if storage.data_ptr() not in before:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    activations = sum(saved.values())
    if rank == 0:
        line = {"images_per_sec": a.steps * a.batch_size / seconds,
                "step_ms": 1e3 * seconds / a.steps, "peak_rss_mib": peak_rss,
                "ranks": world, "model": a.model, "batch_size": a.batch_size,
                "sequence_parallel": a.sequence_parallel, "activation_mib": activations / 2**20}
        print(f"pytorch DTensor tensor parallel: {a.model} over {world} ranks, "
              f"{line['images_per_sec']:.1f} images/s, {line['step_ms']:.1f} ms a step, "
              f"peak RSS {line['peak_rss_mib']:.0f} MiB, activations {line['activation_mib']:.1f} MiB")
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(line) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
