#!/usr/bin/env bash
# Activation checkpointing against none, in one run (docs/performance.md, "Activation
# checkpointing"): on ResNet-101 and ViT-B/16 at 224x224, one process on the CPU,
# - the activation memory of one step at --batch_size, from `ddpx plan`'s probe (one forward,
#   loss and backward counted at libtorch's CPU allocator, the model wrapped as ddpx train wraps
#   it, so the recompute's own tensors count too);
# - the step time of ddpx train's loop (`bench train`).
# Usage: bench/compare_checkpointing.sh   (BUILD=build; MODELS="resnet101 vit_b_16", SIZE=224,
#        BATCH=8, STEPS=3, WARMUP=1, POLICY=blocks)
set -euo pipefail
source "$(dirname "$0")/common.sh"
models="${MODELS:-resnet101 vit_b_16}"; size="${SIZE:-224}"; batch="${BATCH:-8}"
steps="${STEPS:-3}"; warmup="${WARMUP:-1}"; policy="${POLICY:-blocks}"
machine_line
echo "# ${size}x$size synthetic images, 10 classes, batch $batch, one process, $(nproc) threads, SGD momentum, $steps steps after $warmup"
for model in $models; do
  for p in none "$policy"; do
    "$ddpx" plan --model "$model" --gpus 1 --batch_size "$batch" --image_size "$size" \
      --num_classes 10 --activation_checkpointing "$p" --json | head -1 > "$out/$model.$p.plan"
    "$ddpx" bench train --model "$model" --image_size "$size" --batch_size "$batch" \
      --steps "$steps" --warmup "$warmup" --no_augment --activation_checkpointing "$p" \
      --json "$out/$model.$p.bench" >/dev/null
  done
done
$py - "$out" "$policy" $models <<'PY'
import json, os, sys
d, policy, models = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(name):
    return json.loads(open(os.path.join(d, name)).readline())
print(f"# {'model':<10} {'policy':<9} {'activations MiB':>16} {'step ms':>9}")
for m in models:
    a = {p: load(f"{m}.{p}.plan")["activation_bytes"] / 2**20 for p in ("none", policy)}
    t = {p: load(f"{m}.{p}.bench")["step_ms"] for p in ("none", policy)}
    for p in ("none", policy):
        print(f"  {m:<10} {p:<9} {a[p]:16.0f} {t[p]:9.0f}")
    print(f"# {m}: activations {100 * (a[policy] / a['none'] - 1):+.0f}%, "
          f"step time {100 * (t[policy] / t['none'] - 1):+.0f}%")
PY
