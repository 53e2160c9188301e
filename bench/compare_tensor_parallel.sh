#!/usr/bin/env bash
# Tensor parallel beside PyTorch, in one run (docs/performance.md, "Tensor parallel"): ddpx
# train's loop with --tensor_parallel T, with and without --sequence_parallel, and PyTorch's
# DTensor tensor parallelism (parallelize_module, ColwiseParallel/RowwiseParallel, torchtitan's
# split, and torchtitan's SequenceParallel; bench/pytorch_tensor_parallel.py) on a ViT of the same
# shape, on the same T ranks, batch and synthetic data, CPU and Gloo: images/s, step time, rank
# 0's peak resident memory, and each rank's activations (ddpx's `bench memory`: the tensor bytes
# a forward adds and still holds when its backward starts; the peer: the tensors its forward
# saves for backward, by autograd's saved-tensor hooks; the most over the ranks). Each configuration runs alone, one after the other. DTensor's sequence
# parallelism fails in backward when T does not divide the tokens (PyTorch 2.11); its row then
# says so.
# Usage: bench/compare_tensor_parallel.sh [steps]   (BUILD=build; MODEL=vit_tiny_patch4_32,
#        SIZE=the model's, BATCH=32, RANKS=3 (T; the model's heads must divide by it), STEPS=10,
#        WARMUP=2). vit_b_16 at SIZE=112 (50 tokens) with RANKS=2 runs every row.
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-${STEPS:-10}}"
model="${MODEL:-vit_tiny_patch4_32}"; batch="${BATCH:-32}"; ranks="${RANKS:-3}"
warmup="${WARMUP:-2}"; size="${SIZE:-}"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))
ddpx_size=${size:+--image_size $size}

machine_line
echo "# $model, synthetic ${size:-model-size} images, 10 classes, batch $batch, $ranks tensor-parallel ranks x $threads thread(s), SGD momentum, $steps steps after $warmup"
for sequence in "" "--sequence_parallel"; do
  name="ddpx${sequence:+_sequence}"
  "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
    train --model "$model" $ddpx_size --batch_size "$batch" --steps "$steps" --warmup "$warmup" \
    --no_augment --tensor_parallel "$ranks" $sequence --json "$out/$name" > "$out/$name.log" 2>&1
  "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
    memory --model "$model" $ddpx_size --batch_size "$batch" --num_classes 10 \
    --tensor_parallel "$ranks" $sequence --json > "$out/$name.memory" 2> "$out/$name.memory.log"
done
for sequence in "" "--sequence_parallel"; do
  name="pytorch${sequence:+_sequence}"
  port=$(free_port)
  for r in $(seq 0 $((ranks - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
      $py bench/pytorch_tensor_parallel.py --model "$model" ${size:+--image_size $size} \
      --batch_size "$batch" --steps "$steps" --warmup "$warmup" --threads "$threads" $sequence \
      --json "$out/$name" >/dev/null 2>"$out/$name.$r.err" &
  done
  wait || true  # a failed peer leaves no line; its row says so
done
$py - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
def row(name):
    path = os.path.join(d, name)
    return json.loads(open(path).readline()) if os.path.exists(path) else None
def activations(name):  # ddpx: the most over the ranks, from bench memory's lines
    path = os.path.join(d, name + ".memory")
    lines = [json.loads(l) for l in open(path) if l.startswith("{")] if os.path.exists(path) else []
    return max(l["activation_bytes"] for l in lines) / 2**20 if lines else None
print(f"# {'configuration':<50} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13} {'activations MiB':>16}")
rows = [("ddpx --tensor_parallel", "ddpx"), ("ddpx --tensor_parallel --sequence_parallel", "ddpx_sequence"),
        ("pytorch DTensor (ColwiseParallel/RowwiseParallel)", "pytorch"),
        ("pytorch DTensor with SequenceParallel", "pytorch_sequence")]
figures = {}
for label, name in rows:
    r = row(name)
    figures[name] = r
    if r is None:
        err = [l.strip() for l in open(os.path.join(d, name + ".0.err")) if "Error" in l]
        print(f"  {label:<50} failed: {err[-1] if err else '?'}"
              + (" (DTensor's sequence parallel wants T to divide the tokens)" if "sequence" in name else ""))
        continue
    act = r.get("activation_mib") if name.startswith("pytorch") else activations(name)
    print(f"  {label:<50} {r['images_per_sec']:8.1f} {r['step_ms']:8.1f} {r['peak_rss_mib']:13.0f} "
          f"{act if act is not None else float('nan'):16.1f}")
    r["activations"] = act
for ours, theirs in (("ddpx", "pytorch"), ("ddpx_sequence", "pytorch_sequence")):
    a, b = figures[ours], figures[theirs]
    if a and b:
        print(f"# {ours} / {theirs}: images/s {a['images_per_sec'] / b['images_per_sec']:.2f}x, "
              f"activations {a['activations'] - b['activations']:+.1f} MiB")
for tool in ("ddpx", "pytorch"):
    a, b = figures[tool], figures[tool + "_sequence"]
    if a and b:
        print(f"# {tool}: sequence parallel holds {a['activations'] - b['activations']:.1f} MiB "
              f"less activations a rank")
PY
