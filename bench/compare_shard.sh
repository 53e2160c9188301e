#!/usr/bin/env bash
# Sharded data parallel beside PyTorch, in one run (docs/performance.md, "Sharding"): ddpx train's
# loop with --shard none (DDP), optimizer (ZeRO-1), gradients (ZeRO-2) and full (ZeRO-3), and
# PyTorch's DDP and FSDP2 (fully_shard on each residual block, then the model), on the same
# model, ranks, batch and synthetic data, CPU and Gloo: images/s of all ranks and rank 0's peak
# resident memory. Each configuration runs alone, one after the other.
# ROUNDS=N repeats every configuration N times, ddpx's and the peer's in turn within each round,
# so a loaded machine's drift falls on both: every round's rows, then the median of each
# configuration's figures over the rounds, the summary lines from the medians, and each ratio's
# value in every round with their spread (min-max).
# Usage: bench/compare_shard.sh [steps]   (BUILD=build; MODEL=resnet18, SIZE=32, BATCH=32,
#        RANKS=2, STEPS=20, WARMUP=3, ROUNDS=1)
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-${STEPS:-20}}"
model="${MODEL:-resnet18}"; size="${SIZE:-32}"; batch="${BATCH:-32}"; ranks="${RANKS:-2}"
warmup="${WARMUP:-3}"; rounds="${ROUNDS:-1}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_shard: ROUNDS=$rounds: expected a positive integer" >&2; exit 2; }
rounds_note=""; [ "$rounds" = 1 ] || rounds_note=", $rounds interleaved rounds"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))

machine_line
echo "# $model, ${size}x$size synthetic images, 10 classes, batch $batch per rank, $ranks ranks x $threads thread(s), SGD momentum, $steps steps after $warmup${rounds_note}"
for round in $(seq 1 "$rounds"); do
  for shard in none optimizer gradients full; do
    "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee none -- bench train --model "$model" \
      --image_size "$size" --batch_size "$batch" --steps "$steps" --warmup "$warmup" --no_augment \
      --shard "$shard" --json "$out/ddpx_$shard.$round" >/dev/null
  done
  for peer in ddp fsdp; do
    port=$(free_port)
    flag=""; [ "$peer" = fsdp ] && flag="--fsdp"
    for r in $(seq 0 $((ranks - 1))); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
        $py bench/pytorch_train.py --model "$model" --image_size "$size" --batch_size "$batch" \
        --steps "$steps" --warmup "$warmup" --threads "$threads" --workers 1 --no_augment $flag \
        --json "$out/pt_$peer.$round" >/dev/null &
    done
    wait
  done
done
$py - "$out" "$rounds" <<'PY'
import json, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def row(name, k):
    return json.loads(open(os.path.join(d, f"{name}.{k}")).readline())
fields = ("images_per_sec", "step_ms", "peak_rss_mib")
rows = [("ddpx --shard none (DDP)", "ddpx_none"), ("ddpx --shard optimizer (ZeRO-1)", "ddpx_optimizer"),
        ("ddpx --shard gradients (ZeRO-2)", "ddpx_gradients"), ("ddpx --shard full (ZeRO-3)", "ddpx_full"),
        ("pytorch DDP", "pt_ddp"), ("pytorch FSDP2 fully_shard", "pt_fsdp")]
per_round = [{f: row(f, k) for _, f in rows} for k in range(1, rounds + 1)]
# the median over the rounds of each configuration's figures (with one round, its figures)
r = {f: {x: statistics.median(rr[f][x] for rr in per_round) for x in fields} for _, f in rows}
def table(figures):
    for label, f in rows:
        x = figures[f]
        print(f"  {label:<34} {x['images_per_sec']:8.1f} {x['step_ms']:8.1f} {x['peak_rss_mib']:13.0f}")
def spread(ratio, fmt):  # with several rounds: the ratio in each round and their min-max
    if rounds == 1:
        return ""
    values = [ratio(rr) for rr in per_round]
    return (f" (rounds {', '.join(fmt(v) for v in values)}; spread {fmt(min(values))} to {fmt(max(values))})")
print(f"# {'configuration':<34} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13}")
if rounds > 1:
    for k, rr in enumerate(per_round, 1):
        print(f"# round {k}")
        table(rr)
    print(f"# median of {rounds} rounds")
table(r)
for f in ("ddpx_optimizer", "ddpx_gradients", "ddpx_full"):
    step = lambda x, f=f: 100 * (x[f]["step_ms"] / x["ddpx_none"]["step_ms"] - 1)
    print(f"# {f[5:]}: step time {step(r):+.1f}% vs ddpx DDP{spread(step, lambda v: f'{v:+.1f}%')}")
ips = lambda x: x["ddpx_full"]["images_per_sec"] / x["pt_fsdp"]["images_per_sec"]
print(f"# ddpx ZeRO-3 / FSDP2 images/s: {ips(r):.2f}x, "
      f"peak RSS {r['ddpx_full']['peak_rss_mib'] - r['pt_fsdp']['peak_rss_mib']:+.0f} MiB"
      f"{spread(ips, lambda v: f'{v:.2f}x')}")
PY
