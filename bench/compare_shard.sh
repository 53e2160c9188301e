#!/usr/bin/env bash
# Sharded data parallel beside PyTorch, in one run (docs/performance.md, "Sharding"): ddpx train's
# loop with --shard none (DDP), optimizer (ZeRO-1), gradients (ZeRO-2) and full (ZeRO-3), and
# PyTorch's DDP and FSDP2 (fully_shard on each residual block, then the model), on the same
# model, ranks, batch and synthetic data, CPU and Gloo: images/s of all ranks and rank 0's peak
# resident memory. Each configuration runs alone, one after the other.
# Usage: bench/compare_shard.sh [steps]   (BUILD=build; MODEL=resnet18, SIZE=32, BATCH=32,
#        RANKS=2, STEPS=20, WARMUP=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-${STEPS:-20}}"
model="${MODEL:-resnet18}"; size="${SIZE:-32}"; batch="${BATCH:-32}"; ranks="${RANKS:-2}"
warmup="${WARMUP:-3}"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))

machine_line
echo "# $model, ${size}x$size synthetic images, 10 classes, batch $batch per rank, $ranks ranks x $threads thread(s), SGD momentum, $steps steps after $warmup"
for shard in none optimizer gradients full; do
  "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee none -- bench train --model "$model" \
    --image_size "$size" --batch_size "$batch" --steps "$steps" --warmup "$warmup" --no_augment \
    --shard "$shard" --json "$out/ddpx_$shard" >/dev/null
done
for peer in ddp fsdp; do
  port=$(free_port)
  flag=""; [ "$peer" = fsdp ] && flag="--fsdp"
  for r in $(seq 0 $((ranks - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
      $py bench/pytorch_train.py --model "$model" --image_size "$size" --batch_size "$batch" \
      --steps "$steps" --warmup "$warmup" --threads "$threads" --workers 1 --no_augment $flag \
      --json "$out/pt_$peer" >/dev/null &
  done
  wait
done
$py - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
def row(name):
    return json.loads(open(os.path.join(d, name)).readline())
print(f"# {'configuration':<34} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13}")
rows = [("ddpx --shard none (DDP)", "ddpx_none"), ("ddpx --shard optimizer (ZeRO-1)", "ddpx_optimizer"),
        ("ddpx --shard gradients (ZeRO-2)", "ddpx_gradients"), ("ddpx --shard full (ZeRO-3)", "ddpx_full"),
        ("pytorch DDP", "pt_ddp"), ("pytorch FSDP2 fully_shard", "pt_fsdp")]
r = {k: row(f) for _, f in rows for k in [f]}
for label, f in rows:
    x = r[f]
    print(f"  {label:<34} {x['images_per_sec']:8.1f} {x['step_ms']:8.1f} {x['peak_rss_mib']:13.0f}")
base = r["ddpx_none"]["step_ms"]
for f in ("ddpx_optimizer", "ddpx_gradients", "ddpx_full"):
    print(f"# {f[5:]}: step time {100 * (r[f]['step_ms'] / base - 1):+.1f}% vs ddpx DDP")
print(f"# ddpx ZeRO-3 / FSDP2 images/s: {r['ddpx_full']['images_per_sec'] / r['pt_fsdp']['images_per_sec']:.2f}x, "
      f"peak RSS {r['ddpx_full']['peak_rss_mib'] - r['pt_fsdp']['peak_rss_mib']:+.0f} MiB")
PY
