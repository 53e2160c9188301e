#!/usr/bin/env python3
"""The PyTorch peer of `ddpx train --model gpt-nano --dataset tokens` (bench/compare_lm.sh):
nanoGPT's model and loop in eager PyTorch, the same math as ddpx's GPT (learned positions,
pre-norm blocks, one fused q/k/v projection, causal attention through
scaled_dot_product_attention, a 4x GELU-tanh MLP, the head tied to the token embedding, GPT-2's
initialisation), AdamW (fused where this torch has it on the device) with weight decay on the
matrices only, nanoGPT's warmup + cosine, gradients clipped at --clip. Windows of seq_len + 1
tokens at random offsets of an llm.c token file (nanoGPT's get_batch). Under torchrun's
variables (RANK, WORLD_SIZE, ...) it is DistributedDataParallel over gloo, each rank its own
windows; with --fsdp it is FSDP2 instead (`fully_shard` on each block, then on the model:
torchtitan's ZeRO-3 layout, parameters resharded after forward). --checkpoint recomputes each
block in backward (torch.utils.checkpoint, non-reentrant), as ddpx's --activation_checkpointing
blocks.

Times --steps steps after --warmup untimed ones (the clock stops after a loss is read, as ddpx
reads one every step on a CPU) and prints one JSON line on rank 0: tokens_per_sec (all ranks),
step_ms, peak_rss_mib (rank 0's maximum resident memory), parameters, flops_per_token.

Run with the torch ddpx was built against: .venv/bin/python bench/pytorch_gpt.py --help
"""
import argparse
import json
import math
import os
import resource
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):  # x: (B, T, C)
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_embd, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):  # idx, targets: (B, T)
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head: (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def read_tokens(path):
    """An llm.c token file: 256 int32 header (magic 20240520, version 1 or 7, count), tokens."""
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520, f"{path}: not an llm.c token file"
    dtype = np.uint16 if header[1] == 1 else np.uint32
    return np.memmap(path, dtype=dtype, mode="r", offset=1024, shape=(int(header[2]),))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", required=True, help="train.bin of `ddpx data tokenize`")
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_embd", type=int, default=128)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--vocab_size", type=int, default=0, help="0: the largest token + 1")
    p.add_argument("--seq_len", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=12, help="windows per rank and step")
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="append the JSON line to this file too")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (ZeRO-3) instead of DDP")
    p.add_argument("--checkpoint", action="store_true", help="recompute each block in backward")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(a.seed)
    data = read_tokens(os.path.join(a.data_dir, "train.bin"))
    vocab = a.vocab_size or int(data.max()) + 1
    model = GPT(vocab, a.block_size, a.n_layer, a.n_head, a.n_embd, a.checkpoint)
    params = sum(p.numel() for p in model.parameters())
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for block in model.h:
            fully_shard(block)
        fully_shard(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=a.learning_rate, betas=(0.9, 0.999), fused=True)
        fused = True
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=a.learning_rate, betas=(0.9, 0.999))
        fused = False
    net = nn.parallel.DistributedDataParallel(model) if world > 1 and not a.fsdp else model
    total = a.warmup + a.steps

    def lr_at(step):  # nanoGPT's get_lr over the run's steps
        if step < a.warmup_steps:
            return a.learning_rate * (step + 1) / (a.warmup_steps + 1)
        ratio = (step - a.warmup_steps) / max(1, total - a.warmup_steps)
        return a.learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio)))

    rng = np.random.default_rng(a.seed * 1000 + rank)

    def batch():
        starts = rng.integers(0, len(data) - a.seq_len - 1, a.batch_size)
        w = torch.from_numpy(np.stack([data[s:s + a.seq_len + 1].astype(np.int64) for s in starts]))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    net.train()
    for step in range(total):
        if step == a.warmup:
            if world > 1:
                dist.barrier()
            start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = batch()
        loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        last = loss.item()
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    non_embedding = params - a.block_size * a.n_embd
    flops_per_token = 6 * non_embedding + 12 * a.n_layer * a.n_embd * a.seq_len
    line = {
        "tokens_per_sec": a.steps * a.batch_size * a.seq_len * world / seconds,
        "step_ms": 1000 * seconds / a.steps,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parameters": params, "flops_per_token": flops_per_token, "loss": last,
        "world_size": world, "threads": a.threads, "fused_adamw": fused, "fsdp": a.fsdp,
        "checkpoint": a.checkpoint,
    }
    if rank == 0:
        print(json.dumps(line))
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(line) + "\n")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
