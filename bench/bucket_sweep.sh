#!/usr/bin/env bash
# DDP bucket-size sweep (docs/performance.md): `ddpx run 2 -- bench train` for each bucket cap,
# ResNet-18 and ResNet-50, 32x32 synthetic input, batch 64 per worker, one thread per worker.
# Sizes are interleaved over several rounds and the median taken, so slow drift of the machine
# hits every size alike. Prints one row per model and size, and whether the default (25 MiB)
# is within 10% of the best.
# Usage: bench/bucket_sweep.sh [steps] [rounds] [models]   (DDPX_BIN or BUILD=build; 20 steps, 3 rounds)
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-20}"
rounds="${2:-3}"
models="${3:-resnet18 resnet50}"
sizes="1 5 25 100"
default=25

machine_line
echo "# ddpx run 2 --threads_per_worker 1 -- bench train --loop phases --model M --image_size 32 --batch_size 64 --steps $steps --bucket_mb B; median of $rounds rounds"
for model in $models; do
  for round in $(seq "$rounds"); do
    for b in $sizes; do
      "$ddpx" run 2 --threads_per_worker 1 --tee none -- bench train --loop phases --model "$model" \
        --image_size 32 --batch_size 64 --steps "$steps" --warmup 3 --bucket_mb "$b" \
        --json "$out/$model-$b" >/dev/null 2>"$out/stderr" || { cat "$out/stderr"; exit 1; }
    done
  done
done
"${DDPX_PYTHON:-$(scripts/python-env)}" - "$out" "$models" "$sizes" "$default" <<'PY'
import json, os, statistics, sys
d, models, sizes, default = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
print("| model | bucket cap (MiB) | images/s (median) | communication not hidden (ms) | of best |")
print("|---|---:|---:|---:|---:|")
for m in models:
    rows = {}
    for b in sizes:
        runs = [json.loads(l) for l in open(os.path.join(d, f"{m}-{b}"))]
        rows[b] = (statistics.median(r["images_per_sec"] for r in runs),
                   statistics.median(r["exposed_comm_ms"] for r in runs))
    best = max(v[0] for v in rows.values())
    for b in sizes:
        ips, comm = rows[b]
        mark = " (default)" if b == default else ""
        print(f"| {m} | {b}{mark} | {ips:.1f} | {comm:.1f} | {ips / best:.3f} |")
    verdict = "within" if rows[default][0] >= 0.9 * best else "NOT within"
    print(f"# {m}: the default is {verdict} 10% of the best ({rows[default][0] / best:.3f})")
PY
