#!/usr/bin/env bash
# Peak memory of one training step, ddpx beside torchvision, for every model in the zoo at its
# default input size (docs/performance.md, "Model memory"). Each side runs in a fresh process:
# `ddpx bench memory` and bench/pytorch_memory.py under the same torch (DDPX_PYTHON, else the .venv).
# Usage: bench/compare_memory.sh [batch] [model...]   (BUILD=build, THREADS=1 by default)
set -euo pipefail
source "$(dirname "$0")/common.sh"
batch="${1:-2}"
shift || true
threads="${THREADS:-1}"
if [ $# -gt 0 ]; then models=("$@"); else mapfile -t models < <("$ddpx" models | awk '!/^#/ && NF && $1 != "mlp" {print $1}'); fi  # mlp is ddpx's own: no torchvision peer

# field LINE KEY: the value of KEY=... in a `memory ...` line
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

machine_line
echo "# one training step (forward, cross-entropy, backward, SGD momentum), batch $batch, 1000 classes, $threads thread(s)"
echo "# MiB of resident memory: peak = the process's VmHWM; increase = peak - VmRSS before the model was built"
printf "# %-22s %5s %9s %9s %6s %9s %9s %6s %8s %8s\n" model size ddpx_peak torch_peak ratio \
  ddpx_incr torch_incr ratio ddpx_bld torch_bld
for m in "${models[@]}"; do
  d=$("$ddpx" bench memory --model "$m" --batch_size "$batch" --threads "$threads" | grep '^memory ')
  size=$(field "$d" size)
  t=$($py bench/pytorch_memory.py --model "$m" --image_size "$size" --batch_size "$batch" \
        --threads "$threads" | grep '^memory ')
  $py - "$m" "$size" "$d" "$t" <<'PY'
import sys
name, size, d, t = sys.argv[1:]
def kv(line): return dict(x.split("=", 1) for x in line.split()[1:])
d, t = kv(d), kv(t)
dp, tp = float(d["peak_mib"]), float(t["peak_mib"])
di, ti = dp - float(d["baseline_mib"]), tp - float(t["baseline_mib"])
print(f"  {name:<22} {size:>5} {dp:9.0f} {tp:9.0f} {dp / tp:6.2f} {di:9.0f} {ti:9.0f} {di / ti:6.2f}"
      f" {float(d['build_s']):8.2f} {float(t['build_s']):8.2f}")
PY
done
