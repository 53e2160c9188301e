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

The split layouts (bench/compare_lm_layouts.sh), one rank a process under torchrun's variables
or forked from one interpreter by --ranks N:
--tp T [--sp] is DTensor tensor parallelism on T ranks with torchtitan's plan (parallelize_module:
q/k/v and c_fc ColwiseParallel, the c_projs RowwiseParallel, --sp's SequenceParallel on the
LayerNorms) and the token embedding and its tied head split over the vocabulary (RowwiseParallel
on the embedding, whose DTensor weight gives the head's logits sharded over the vocabulary for
loss_parallel's cross-entropy: Megatron's vocabulary-parallel loss; --vocab_size pads the
vocabulary as ddpx does, but the padded columns count in the peer's softmax, where ddpx masks
them); --fsdp --tp T is fully_shard over the data dimension of a (world / T) x T DeviceMesh of
that (torchtitan's 2-D); --pp P is torch.distributed.pipelining (PipelineStage + Schedule1F1B or
ScheduleGPipe, 2 x P micro-batches) cut at ddpx's block boundary, the tied embedding held by the
first and the last stage and its two gradients summed after each backward, as ddpx. The
gradient norm of the split layouts counts every element once (clip_grad_norm below).

Times --steps steps after --warmup untimed ones (the clock stops after a loss is read, as ddpx
reads one every step on a CPU) and prints one JSON line on rank 0: tokens_per_sec (all ranks),
step_ms, peak_rss_mib (rank 0's maximum resident memory; peak_rss_mib_max: the most over the
ranks), parameters, flops_per_token.

Run with the torch ddpx was built against: .venv/bin/python bench/pytorch_gpt.py --help
"""
import argparse
import json
import math
import os
import resource
import sys
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)


class Attention(nn.Module):
    """Causal self-attention with one fused q/k/v projection. Its 3C output rows are laid out by
    tensor rank, [q_0 k_0 v_0 q_1 k_1 v_1 ...] (one group at one rank: nanoGPT's [q k v]), so
    that ColwiseParallel's contiguous shard gives each rank the q, k and v of its heads, as ddpx
    splits c_attn by heads: a relabelling of the same i.i.d. initialisation, the same math."""

    def __init__(self, c, n_head):
        super().__init__()
        self.head_dim = c // n_head
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):  # x: (B, T, C), whole (the tensor-parallel input region)
        qkv = self.c_attn(x)  # (B, T, 3C/tp): this rank's heads
        b, t = qkv.shape[:2]
        q, k, v = (z.view(b, t, -1, self.head_dim).transpose(1, 2) for z in qkv.chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh/tp, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = Attention(c, n_head)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_embd, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.sequence_mesh = None  # set: the stream sharded over tokens on it (--sp)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def embed(self, idx):  # (B, T) token ids -> (B, T, C), or under --sp this rank's tokens
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx)
        if self.sequence_mesh is None:
            return x + self.wpe(pos)
        share = x.size(1)  # the vocabulary-parallel embedding reduce-scattered over tokens
        r = self.sequence_mesh.get_local_rank()
        x = x + self.wpe(pos[r * share:(r + 1) * share])
        return DTensor.from_local(x, self.sequence_mesh, [Shard(1)], run_check=False)

    def blocks(self, x, blocks):
        for block in blocks:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x

    def logits(self, x):  # the tied head: (B, T, V), or under --tp a DTensor sharded over V
        h = self.ln_f(x)
        w = self.wte.weight
        if isinstance(w, DTensor):  # gather the tokens (--sp) or wrap the whole stream
            if isinstance(h, DTensor):
                h = h.redistribute(w.device_mesh, [Replicate()])
            else:
                h = DTensor.from_local(h, w.device_mesh, [Replicate()], run_check=False)
        return F.linear(h, w)

    def forward(self, idx):  # idx: (B, T) -> logits
        return self.logits(self.blocks(self.embed(idx), self.h))


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.reshape(-1))


def tensor_parallelize(model, mesh, sequence):
    """torchtitan's plan for a GPT on `mesh` (its parallelize_llama, GPT's module names): the
    token embedding RowwiseParallel (split over the vocabulary, its partial sums all-reduced, or
    reduce-scattered over tokens under --sp), q/k/v and c_fc ColwiseParallel, the c_projs
    RowwiseParallel; --sp adds SequenceParallel on the LayerNorms with the attention's and MLP's
    inputs all-gathered (PrepareModuleInput) and the c_projs reduce-scattering into the stream.
    The tied head is the embedding's DTensor weight (Shard(0)): its logits come out Shard(-1),
    the vocabulary-parallel input loss_parallel() wants."""
    parallelize_module(model, mesh, {
        "wte": RowwiseParallel(input_layouts=Replicate(),
                               output_layouts=Shard(1) if sequence else Replicate()),
        **({"ln_f": SequenceParallel()} if sequence else {})})
    for block in model.h:
        plan = {"attn.c_attn": ColwiseParallel(), "attn.c_proj": RowwiseParallel(),
                "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()}
        if sequence:
            gather = PrepareModuleInput(input_layouts=(Shard(1),),
                                        desired_input_layouts=(Replicate(),),
                                        use_local_output=True)
            plan.update({"ln_1": SequenceParallel(), "ln_2": SequenceParallel(),
                         "attn": gather, "mlp": gather,
                         "attn.c_proj": RowwiseParallel(output_layouts=Shard(1),
                                                        use_local_output=False),
                         "mlp.c_proj": RowwiseParallel(output_layouts=Shard(1),
                                                       use_local_output=False)})
        parallelize_module(block, mesh, plan)
    if sequence:
        model.sequence_mesh = mesh


class PipelineStageModule(nn.Module):
    """Stage `stage` of 2 of the GPT, cut where ddpx cuts it (parameters balanced: the embedding
    and the first half of the blocks, then the second half, the final LayerNorm and the head).
    Both stages hold the tied token embedding, its two gradients summed after each backward
    (Megatron's embedding group, as ddpx)."""

    def __init__(self, gpt, stage, stages):
        super().__init__()
        self.gpt, self.first, self.last = gpt, stage == 0, stage == stages - 1
        per = len(gpt.h) // stages
        self.mine = gpt.h[stage * per:(stage + 1) * per if not self.last else len(gpt.h)]
        for i, block in enumerate(gpt.h):
            if block not in list(self.mine):
                gpt.h[i] = nn.Identity()
        if not self.first:
            gpt.wpe = None
        if not self.last:
            gpt.ln_f = None

    def forward(self, x):
        if self.first:
            x = self.gpt.embed(x)
        x = self.gpt.blocks(x, self.mine)
        return self.gpt.logits(x) if self.last else x


def local(t):
    return t.to_local() if isinstance(t, DTensor) else t


def clip_grad_norm(params, max_norm, group=None, counted=lambda p: True):
    """The L2 norm of every gradient over all ranks, each element counted once (a DTensor's
    local shard divided by the ranks it is replicated over, a plain tensor by the ranks it is
    whole on), then the gradients scaled to max_norm: torch's clip_grad_norm_ takes no mix of
    DTensor and plain tensors. `counted`: False for a copy counted elsewhere (the tied head)."""
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    total = torch.zeros(())
    grads = []
    for p in params:
        if p.grad is None:
            continue
        grads.append(p.grad)
        if not counted(p):
            continue
        g = p.grad
        if isinstance(g, DTensor):
            copies = 1
            for size, placement in zip(g.device_mesh.shape, g.placements):
                copies *= size if placement.is_replicate() else 1
            copies *= world // g.device_mesh.size()
        else:
            copies = world
        total += local(g).float().pow(2).sum() / copies
    if world > 1:
        dist.all_reduce(total, group=group)
    norm = total.sqrt()
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        local(g).mul_(scale)
    return norm


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
    p.add_argument("--vocab_size", type=int, default=0,
                   help="0: the largest token + 1 (more: rows never a target, as ddpx's padding)")
    p.add_argument("--seq_len", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=12, help="windows per replica and step")
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
    p.add_argument("--tp", type=int, default=1,
                   help="DTensor tensor parallelism over this many ranks (with --fsdp: the inner "
                        "dimension of a data x tensor mesh)")
    p.add_argument("--sp", action="store_true", help="with --tp: sequence parallelism too")
    p.add_argument("--pp", type=int, default=1,
                   help="torch.distributed.pipelining over this many stages (the whole world)")
    p.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    p.add_argument("--microbatches", type=int, default=0, help="0: 2 x --pp, as ddpx")
    p.add_argument("--ranks", type=int, default=0,
                   help="start this many ranks on 127.0.0.1 as forks of this process (instead "
                        "of torchrun's variables); rank R prints to OUT.R.json and OUT.R.err. For "
                        "smoke runs: a fork's peak_rss_mib leaves out the pages it shares "
                        "untouched with this process")
    p.add_argument("--out", help="with --ranks: the ranks' output files' prefix")
    a = p.parse_args()
    if a.ranks:
        sys.exit(fork_ranks(a))
    run(a)


def fork_ranks(a):
    """--ranks N: N ranks forked once torch and torch.distributed are imported, rather than N
    interpreters each importing them (about 3 CPU-s a rank on the 2-core machine: most of a
    smoke-sized layout's run). Nothing here has started a thread or touched a process group
    yet, so each fork is a fresh rank; its clock starts after its warmup steps, as a spawned
    rank's. Its ru_maxrss, though, counts only the pages it touches itself (the libraries' pages
    stay its parent's), so its peak memory reads lower than a spawned rank's. Returns 0 when
    every rank exits with 0."""
    import socket
    # What run() imports for these layouts, once here rather than in each rank.
    import torch.distributed.device_mesh  # noqa: F401
    if a.fsdp:
        import torch.distributed.fsdp  # noqa: F401
    if a.pp > 1:
        import torch.distributed.pipelining  # noqa: F401
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for r in range(a.ranks):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.environ.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.ranks),
                                  MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                for fd, suffix in ((1, "json"), (2, "err")):
                    f = os.open(f"{a.out}.{r}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                0o644)
                    os.dup2(f, fd)
                    os.close(f)
                run(a)
                code = 0
            except SystemExit as e:  # the refusals' messages are their codes
                if isinstance(e.code, int):
                    code = e.code
                else:
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    failed = [r for r, pid in enumerate(pids) if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])]
    for r in failed:
        print(f"pytorch_gpt: rank {r} failed ({a.out}.{r}.err)", file=sys.stderr)
    return 1 if failed else 0


def run(a):
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    tp, pp = a.tp, a.pp
    if world % (tp * pp) or (pp > 1 and (tp > 1 or world != pp or a.fsdp)) or \
            (tp > 1 and world != tp and not a.fsdp) or (a.sp and tp == 1):
        raise SystemExit(f"pytorch_gpt: --tp {tp} --pp {pp} {'--fsdp ' if a.fsdp else ''}on "
                         f"{world} ranks: expected --tp T [--sp] on T ranks, --fsdp --tp T on a "
                         f"multiple of T, or --pp P on P ranks")
    replicas = world // (tp * pp)
    replica = rank // tp if pp == 1 else 0  # the data-parallel index: the same windows on a replica
    torch.manual_seed(a.seed)
    data = read_tokens(os.path.join(a.data_dir, "train.bin"))
    vocab = a.vocab_size or int(data.max()) + 1
    model = GPT(vocab, a.block_size, a.n_layer, a.n_head, a.n_embd, a.checkpoint)
    params = sum(p.numel() for p in model.parameters())
    counted = lambda p: True  # noqa: E731  (the parameters the gradient norm counts)
    if tp > 1:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (replicas, tp), mesh_dim_names=("dp", "tp"))
        tensor_parallelize(model, mesh["tp"], a.sp)
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        dp_mesh = mesh["dp"] if tp > 1 else None
        for block in model.h:
            fully_shard(block, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    if pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        model = PipelineStageModule(model, rank, pp)
        tied = model.gpt.wte.weight
        if rank == pp - 1:
            counted = lambda p: p is not tied  # noqa: E731  (the first stage counts it)
        stage = PipelineStage(model, rank, pp, torch.device("cpu"))
        microbatches = a.microbatches or 2 * pp
        schedule = (Schedule1F1B if a.schedule == "1f1b" else ScheduleGPipe)(
            stage, n_microbatches=microbatches, loss_fn=cross_entropy)
        embedding_group = dist.new_group([0, pp - 1])
    # Weight decay on the matrices only; a group per kind of tensor (plain, or DTensor on one
    # mesh): the fused AdamW takes no mix of them in one call.
    kinds = {}
    for p in model.parameters():
        kind = (p.dim() >= 2, id(p.device_mesh) if isinstance(p, DTensor) else None)
        kinds.setdefault(kind, []).append(p)
    groups = [{"params": ps, "weight_decay": a.weight_decay if decay else 0.0}
              for (decay, _), ps in kinds.items()]
    try:
        opt = torch.optim.AdamW(groups, lr=a.learning_rate, betas=(0.9, 0.999), fused=True)
        fused = True
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=a.learning_rate, betas=(0.9, 0.999))
        fused = False
    ddp = world > 1 and not a.fsdp and tp == 1 and pp == 1
    net = nn.parallel.DistributedDataParallel(model) if ddp else model
    total = a.warmup + a.steps

    def lr_at(step):  # nanoGPT's get_lr over the run's steps
        if step < a.warmup_steps:
            return a.learning_rate * (step + 1) / (a.warmup_steps + 1)
        ratio = (step - a.warmup_steps) / max(1, total - a.warmup_steps)
        return a.learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio)))

    rng = np.random.default_rng(a.seed * 1000 + replica)

    def batch():
        starts = rng.integers(0, len(data) - a.seq_len - 1, a.batch_size)
        w = torch.from_numpy(np.stack([data[s:s + a.seq_len + 1].astype(np.int64) for s in starts]))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def step(x, y):  # one optimizer step's forward and backward; the loss on this rank, or None
        if pp > 1:
            losses = []
            if rank == 0:
                schedule.step(x)
            elif rank == pp - 1:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
            dist.all_reduce(tied.grad, group=embedding_group)  # the tied copies' sum
            return torch.stack(losses).mean() if losses else None
        if tp > 1:
            with loss_parallel():
                loss = cross_entropy(net(x), y)
                loss.backward()
            return loss.to_local()
        loss = cross_entropy(net(x), y)
        loss.backward()
        return loss

    net.train()
    for i in range(total):
        if i == a.warmup:
            if world > 1:
                dist.barrier()
            start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(i)
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        loss = step(x, y)
        if a.clip > 0:
            if tp > 1 or pp > 1:
                clip_grad_norm(model.parameters(), a.clip, counted=counted)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        last = loss.item() if loss is not None else None
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    non_embedding = params - a.block_size * a.n_embd
    flops_per_token = 6 * non_embedding + 12 * a.n_layer * a.n_embd * a.seq_len
    line = {
        "tokens_per_sec": a.steps * a.batch_size * a.seq_len * replicas / seconds,
        "step_ms": 1000 * seconds / a.steps,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parameters": params, "flops_per_token": flops_per_token, "loss": last,
        "world_size": world, "threads": a.threads, "fused_adamw": fused, "fsdp": a.fsdp,
        "checkpoint": a.checkpoint, "tp": tp, "sp": a.sp, "pp": pp, "rank": rank,
    }
    if world > 1:  # every rank's peak: rank 0 reports the most
        peaks = [None] * world
        dist.all_gather_object(peaks, line["peak_rss_mib"])
        line["peak_rss_mib_max"] = max(peaks)
        losses = [None] * world
        dist.all_gather_object(losses, last)
        line["loss"] = next(l for l in losses if l is not None)
    if rank == 0:
        print(json.dumps(line))
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(line) + "\n")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
