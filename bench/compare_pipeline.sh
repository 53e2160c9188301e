#!/usr/bin/env bash
# Pipeline parallel beside PyTorch, in one run (docs/performance.md, "Pipeline"): ddpx train's
# loop with --pipeline_parallel P under GPipe and 1F1B, and torch.distributed.pipelining's
# ScheduleGPipe and Schedule1F1B on torchvision's model cut where ddpx cut it (ddpx's stage table
# gives the cut), on the same ranks, batch, micro-batches and synthetic data, CPU and Gloo:
# images/s and rank 0's peak resident memory. Each
# configuration runs alone, one after the other.
# Usage: bench/compare_pipeline.sh [steps]   (BUILD=build; MODEL=resnet18 (a ResNet), SIZE=32,
#        BATCH=32, RANKS=2 (the stages), MICRO=4, STEPS=20, WARMUP=3)
set -euo pipefail
cd "$(dirname "$0")/.."
ddpx="${DDPX_BIN:-${BUILD:-build}/src/ddpx}"
py="${DDPX_PYTHON:-$(scripts/python-env --tests)}"
steps="${1:-${STEPS:-20}}"
model="${MODEL:-resnet18}"; size="${SIZE:-32}"; batch="${BATCH:-32}"; ranks="${RANKS:-2}"
micro="${MICRO:-4}"; warmup="${WARMUP:-3}"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
echo "# $model, ${size}x$size synthetic images, 10 classes, batch $batch in $micro micro-batches, $ranks stages x $threads thread(s), SGD momentum, $steps steps after $warmup"
for schedule in gpipe 1f1b; do
  "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
    train --model "$model" --image_size "$size" --batch_size "$batch" --steps "$steps" \
    --warmup "$warmup" --no_augment --pipeline_parallel "$ranks" --microbatches "$micro" --pipeline_schedule "$schedule" \
    --json "$out/ddpx_$schedule" > "$out/ddpx_$schedule.log" 2>&1
done
# ddpx's cut: the layer count of each stage row of its table ("stem .. layer4.0 (8)" or one name).
cut=$($py - "$out/ddpx_1f1b.log" <<'PY'
import re, sys
bounds = [0]
for line in open(sys.argv[1]):
    m = re.match(r"\s+\d+\s+[\d,]+\s+(.*?)\s{2,}\d+", line)
    if m:
        n = re.search(r"\((\d+)\)$", m.group(1).strip())
        bounds.append(bounds[-1] + (int(n.group(1)) if n else 1))
print(",".join(map(str, bounds)))
PY
)
echo "# ddpx's cut (first layer of each stage): $cut"
for schedule in gpipe 1f1b; do
  port=$(free_port)
  for r in $(seq 0 $((ranks - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
      $py bench/pytorch_train.py --model "$model" --image_size "$size" --batch_size "$batch" \
      --steps "$steps" --warmup "$warmup" --threads "$threads" --workers 1 --no_augment \
      --pipeline "$ranks" --schedule "$schedule" --microbatches "$micro" --pipeline_cut "$cut" \
      --json "$out/pt_$schedule" >/dev/null 2>"$out/pt_$schedule.$r.err" &
  done
  wait
done
$py - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
def row(name):
    return json.loads(open(os.path.join(d, name)).readline())
print(f"# {'configuration':<40} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13}")
rows = [("ddpx --pipeline_schedule gpipe", "ddpx_gpipe"), ("ddpx --pipeline_schedule 1f1b", "ddpx_1f1b"),
        ("pytorch pipelining ScheduleGPipe", "pt_gpipe"), ("pytorch pipelining Schedule1F1B", "pt_1f1b")]
r = {f: row(f) for _, f in rows}
for label, f in rows:
    x = r[f]
    print(f"  {label:<40} {x['images_per_sec']:8.1f} {x['step_ms']:8.1f} {x['peak_rss_mib']:13.0f}")
for s in ("gpipe", "1f1b"):
    a, b = r[f"ddpx_{s}"], r[f"pt_{s}"]
    print(f"# {s}: ddpx / pytorch images/s {a['images_per_sec'] / b['images_per_sec']:.2f}x, "
          f"rank 0 peak RSS {a['peak_rss_mib'] - b['peak_rss_mib']:+.0f} MiB")
PY
