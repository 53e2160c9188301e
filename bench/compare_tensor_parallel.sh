#!/usr/bin/env bash
# Tensor parallel beside PyTorch, in one run (docs/performance.md, "Tensor parallel"): ddpx
# train's loop with --tensor_parallel T (and with --sequence_parallel), and PyTorch's DTensor
# tensor parallelism (parallelize_module, ColwiseParallel/RowwiseParallel, torchtitan's split;
# bench/pytorch_tensor_parallel.py) on a ViT of the same shape, on the same T ranks, batch and
# synthetic data, CPU and Gloo: images/s, step time and rank 0's peak resident memory. Each
# configuration runs alone, one after the other.
# Usage: bench/compare_tensor_parallel.sh [steps]   (BUILD=build; MODEL=vit_tiny_patch4_32,
#        BATCH=32, RANKS=3 (T; the model's heads must divide by it), STEPS=10, WARMUP=2)
set -euo pipefail
cd "$(dirname "$0")/.."
ddpx="${DDPX_BIN:-${BUILD:-build}/src/ddpx}"
py="${DDPX_PYTHON:-$(scripts/python-env --tests)}"
steps="${1:-${STEPS:-10}}"
model="${MODEL:-vit_tiny_patch4_32}"; batch="${BATCH:-32}"; ranks="${RANKS:-3}"
warmup="${WARMUP:-2}"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
echo "# $model, synthetic images at the model's size, 10 classes, batch $batch, $ranks tensor-parallel ranks x $threads thread(s), SGD momentum, $steps steps after $warmup"
for sequence in "" "--sequence_parallel"; do
  name="ddpx${sequence:+_sequence}"
  "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
    train --model "$model" --batch_size "$batch" --steps "$steps" --warmup "$warmup" \
    --no_augment --tensor_parallel "$ranks" $sequence --json "$out/$name" > "$out/$name.log" 2>&1
done
port=$(free_port)
for r in $(seq 0 $((ranks - 1))); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
    $py bench/pytorch_tensor_parallel.py --model "$model" --batch_size "$batch" --steps "$steps" \
    --warmup "$warmup" --threads "$threads" --json "$out/pytorch" >/dev/null 2>"$out/pytorch.$r.err" &
done
wait
$py - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
def row(name):
    return json.loads(open(os.path.join(d, name)).readline())
print(f"# {'configuration':<46} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13}")
rows = [("ddpx --tensor_parallel", "ddpx"), ("ddpx --tensor_parallel --sequence_parallel", "ddpx_sequence"),
        ("pytorch DTensor (ColwiseParallel/RowwiseParallel)", "pytorch")]
figures = {}
for label, name in rows:
    r = row(name)
    figures[name] = r
    print(f"  {label:<46} {r['images_per_sec']:8.1f} {r['step_ms']:8.1f} {r['peak_rss_mib']:13.0f}")
p = figures["pytorch"]["images_per_sec"]
print(f"# ddpx / pytorch images/s: {figures['ddpx']['images_per_sec'] / p:.2f}x "
      f"(sequence parallel: {figures['ddpx_sequence']['images_per_sec'] / p:.2f}x)")
PY
