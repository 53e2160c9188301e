#!/usr/bin/env bash
# PowerSGD beside PyTorch's powerSGD_hook, in one run (docs/performance.md, "PowerSGD"): ddpx
# train's loop (`bench train`) with --comm_hook allreduce and --comm_hook powersgd, and PyTorch's
# DDP without and with powerSGD_hook, on the same model, ranks, batch, rank R and start step
# (CPU, Gloo, synthetic data): images/s, and the gradient elements sent over those before
# compression (ddpx's from its start-up line, PyTorch's from PowerSGDState.compression_stats).
# Each configuration runs alone, one after the other.
# Usage: bench/compare_powersgd.sh [steps]   (BUILD=build; MODEL=resnet18, SIZE=32, BATCH=32,
#        RANKS=2, RANK_R=2 (the approximation rank), START=2, STEPS=20, WARMUP=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-${STEPS:-20}}"
model="${MODEL:-resnet18}"; size="${SIZE:-32}"; batch="${BATCH:-32}"; ranks="${RANKS:-2}"
rank_r="${RANK_R:-2}"; start="${START:-2}"; warmup="${WARMUP:-3}"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))

machine_line
echo "# $model, ${size}x$size synthetic images, 10 classes, batch $batch a rank, $ranks ranks x $threads thread(s), SGD momentum, $steps steps after $warmup; PowerSGD rank $rank_r from step $start"
for hook in allreduce powersgd; do
  flags=(--comm_hook "$hook")
  [[ $hook == powersgd ]] && flags+=(--powersgd_rank "$rank_r" --powersgd_start_iter "$start")
  "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log_$hook" -- \
    bench train --model "$model" --image_size "$size" --batch_size "$batch" --steps "$steps" \
    --warmup "$warmup" --no_augment "${flags[@]}" --json "$out/ddpx_$hook" \
    > "$out/ddpx_$hook.log" 2>&1
done
for r_pt in 0 "$rank_r"; do
  port=$(free_port)
  for r in $(seq 0 $((ranks - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
      $py bench/pytorch_train.py --model "$model" --image_size "$size" --batch_size "$batch" \
      --steps "$steps" --warmup "$warmup" --threads "$threads" --workers 1 --no_augment \
      --powersgd "$r_pt" --powersgd_start_iter "$start" \
      --json "$out/pt_$r_pt" >/dev/null 2>"$out/pt_$r_pt.$r.err" &
  done
  wait
done
$py - "$out" "$rank_r" <<'PY'
import json, os, re, sys
d, rank_r = sys.argv[1], sys.argv[2]
def row(name):
    return json.loads(open(os.path.join(d, name)).readline())
log = open(os.path.join(d, "ddpx_powersgd.log")).read()
m = re.search(r"PowerSGD rank \d+ from step \d+: ([0-9.]+)x less gradient traffic", log)
ddpx_ratio = float(m.group(1)) if m else float("nan")
rows = [("ddpx DDP", "ddpx_allreduce", 1.0), ("ddpx --comm_hook powersgd", "ddpx_powersgd", ddpx_ratio),
        ("pytorch DDP", "pt_0", 1.0), ("pytorch powerSGD_hook", f"pt_{rank_r}", None)]
print(f"# {'configuration':<28} {'img/s':>8} {'step ms':>8} {'traffic':>10}")
r = {}
for label, f, ratio in rows:
    x = row(f)
    if ratio is None:
        ratio = x.get("powersgd_ratio", float("nan"))
    r[f] = (x, ratio)
    print(f"  {label:<28} {x['images_per_sec']:8.1f} {x['step_ms']:8.1f} {ratio:9.1f}x")
a, b = r["ddpx_powersgd"][0], r[f"pt_{rank_r}"][0]
print(f"# PowerSGD: ddpx / pytorch images/s {a['images_per_sec'] / b['images_per_sec']:.2f}x; "
      f"traffic cut ddpx {r['ddpx_powersgd'][1]:.1f}x, pytorch {r[f'pt_{rank_r}'][1]:.1f}x")
PY
