#!/usr/bin/env bash
# ddpx beside PyTorch on the same training workload, in one run (docs/performance.md):
#   1. DDP efficiency: images/s of 2 DDP workers / summed images/s of 2 independent
#      single-thread processes running at the same time (ddpx and PyTorch each).
#   2. End to end: ddpx vs PyTorch DDP on real Fashion-MNIST resized to 32x32 with crop + flip.
#   3. Start-up: process start to the first training step.
# Usage: bench/compare_train.sh [steps]   (BUILD=build by default; STEPS=30)
#   BATCH=64 images per worker and step (CPU parts).
#   ROUNDS=N repeats part 1 N times, ddpx's runs and then PyTorch's in each round, so a loaded
#   machine's drift falls on both, and prints every round's figures, then the median over the
#   rounds of each side's efficiency and of ddpx DDP / pytorch DDP, with their spread (min, max):
#   on a shared VM one run can be off by several percent. WARMUP=5 untimed steps.
#   DEVICE=cuda runs the GPU comparison instead (ResNet-50/101 at 224x224 and ResNet-18 with the
#   CIFAR stem at 32x32, batch 256, bf16, channels_last), beside PyTorch eager on the same GPU.
# Like with like: ddpx's images/s are those of `bench train --loop trainer`, ddpx train's own
# loop, timed as the peer times its loop (a barrier and a device sync before the first timed
# step, a device sync after the last; data time included), with as many loader workers as the
# peer (ddpx: threads, PyTorch: DataLoader processes). `--loop phases` (three device syncs a
# step) gives only the step split.
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-30}"
batch="${BATCH:-64}"
common="--image_size 32 --batch_size $batch --steps $steps --warmup ${WARMUP:-5}"

field() { $py -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[int(sys.argv[2])])[sys.argv[3]])" "$@"; }

machine_line

# DEVICE=cuda: ddpx beside PyTorch eager on this machine's GPU, the issue's settings (batch 256,
# bf16 autocast, channels_last, synthetic data of CIFAR-100's shape at 224x224; ResNet-18 with
# the CIFAR stem at 32x32), images/s and ddpx's MFU. One process each, one GPU.
if [ "${DEVICE:-cpu}" = cuda ]; then
  echo "# GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
  gpu="--device cuda --amp bf16 --channels_last --batch_size 256 --steps $steps --warmup ${WARMUP:-10} --no_augment"
  echo "# both: sync at the window ends only; loader: ddpx 8 threads, pytorch 8 DataLoader processes"
  for spec in "resnet50 imagenet 224" "resnet101 imagenet 224" "resnet18 cifar 32"; do
    set -- $spec
    "$ddpx" bench train --loop trainer --workers 8 $gpu --model "$1" --stem "$2" --image_size "$3" --num_classes 100 --threads 8 --json "$out/g_$1" >/dev/null
    $py bench/pytorch_train.py --device cuda --amp bf16 --channels_last --batch_size 256 --steps "$steps" \
      --warmup "${WARMUP:-10}" --no_augment --model "$1" --stem "$2" --image_size "$3" --num_classes 100 \
      --threads 8 --workers 8 --json "$out/p_$1" >/dev/null
    $py - "$out/g_$1" "$out/p_$1" "$1 $2 stem ${3}x$3" <<'PY'
import json, sys
a = json.loads(open(sys.argv[1]).readline()); b = json.loads(open(sys.argv[2]).readline())
mfu = f" | ddpx MFU {100*a['mfu']:.1f}%" if "mfu" in a else ""
print(f"{sys.argv[3]}: ddpx {a['images_per_sec']:.0f} img/s | pytorch {b['images_per_sec']:.0f} img/s | "
      f"ratio {a['images_per_sec']/b['images_per_sec']:.2f}x{mfu} | peak memory {a.get('peak_memory_gib', 0):.1f} GiB | "
      f"sync: {a['sync']} | loader: {a['loader_workers']} threads / {b['workers']} processes")
PY
  done
  exit 0
fi

echo "# 1. synthetic data, resnet18, 10 classes, 32x32, batch $batch per worker, SGD momentum"
echo "# both: ddpx train's loop / the peer's loop, sync at the window ends; loader: 1 thread / 1 process per worker"
for round in $(seq "${ROUNDS:-1}"); do
  # ddpx: two independent single-thread processes at once, then 2 DDP workers
  "$ddpx" bench train $common --threads 1 --json "$out/ddpx_solo0.$round" >/dev/null &
  "$ddpx" bench train $common --threads 1 --json "$out/ddpx_solo1.$round" >/dev/null
  wait
  "$ddpx" run 2 --threads_per_worker 1 --tee none -- bench train $common --json "$out/ddpx_ddp.$round" >/dev/null
  # PyTorch: the same
  for r in 0 1; do $py bench/pytorch_train.py --threads 1 --workers 1 --batch_size $batch --steps "$steps" --warmup "${WARMUP:-5}" --json "$out/pt_solo$r.$round" >/dev/null & done
  wait
  port=$(free_port)
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      $py bench/pytorch_train.py --threads 1 --workers 1 --batch_size $batch --steps "$steps" --warmup "${WARMUP:-5}" --json "$out/pt_ddp.$round" >/dev/null &
  done
  wait
done
# The step split (a diagnosis, three syncs a step on a GPU): ddpx's phases loop, once.
"$ddpx" run 2 --threads_per_worker 1 --tee none -- bench train --loop phases $common --json "$out/ddpx_phases" >/dev/null
$py - "$out" "${ROUNDS:-1}" <<'PY'
import json, statistics, sys, os
d, rounds = sys.argv[1], int(sys.argv[2])
def ips(name): return json.loads(open(os.path.join(d, name)).readline())["images_per_sec"]
ratios = []; ddp_ratios = []
for k in range(1, rounds + 1):
    ddpx_solo = ips(f"ddpx_solo0.{k}") + ips(f"ddpx_solo1.{k}"); ddpx_ddp = ips(f"ddpx_ddp.{k}")
    pt_solo = ips(f"pt_solo0.{k}") + ips(f"pt_solo1.{k}"); pt_ddp = ips(f"pt_ddp.{k}")
    ratios.append((ddpx_ddp / ddpx_solo, pt_ddp / pt_solo)); ddp_ratios.append(ddpx_ddp / pt_ddp)
    tag = f"round {k}: " if rounds > 1 else ""
    print(f"{tag}ddpx    2 independent: {ddpx_solo:8.1f} img/s | 2-worker DDP: {ddpx_ddp:8.1f} img/s | efficiency {ddpx_ddp/ddpx_solo:.3f}")
    print(f"{tag}pytorch 2 independent: {pt_solo:8.1f} img/s | 2-worker DDP: {pt_ddp:8.1f} img/s | efficiency {pt_ddp/pt_solo:.3f}")
    print(f"{tag}ddpx DDP / pytorch DDP: {ddpx_ddp/pt_ddp:.2f}x")
if rounds > 1:
    median = statistics.median
    print(f"efficiency over {rounds} rounds: ddpx median {median([a for a, _ in ratios]):.3f} "
          f"(min {min(a for a, _ in ratios):.3f}, max {max(a for a, _ in ratios):.3f}) | "
          f"pytorch median {median([b for _, b in ratios]):.3f} "
          f"(min {min(b for _, b in ratios):.3f}, max {max(b for _, b in ratios):.3f})")
    print(f"ddpx DDP / pytorch DDP over {rounds} rounds: median {median(ddp_ratios):.2f}x "
          f"(min {min(ddp_ratios):.2f}x, max {max(ddp_ratios):.2f}x)")
ddp = json.loads(open(os.path.join(d, f"ddpx_ddp.{rounds}")).readline())
split = json.loads(open(os.path.join(d, "ddpx_phases")).readline())
print(f"ddpx step split (--loop phases, {split['images_per_sec']:.1f} img/s): data wait {split['data_wait_ms']:.2f} ms, forward+backward {split['forward_backward_ms']:.1f} ms, "
      f"communication not hidden {split['exposed_comm_ms']:.1f} ms, optimizer {split['optimizer_ms']:.1f} ms of {split['step_ms']:.1f} ms")
pt = json.loads(open(os.path.join(d, f"pt_ddp.{rounds}")).readline())
print(f"start-up to first step: ddpx {ddp['startup_s']:.2f} s, pytorch {pt['startup_s']:.2f} s (ratio {ddp['startup_s']/pt['startup_s']:.2f})")
PY

echo "# 2. Fashion-MNIST resized to 32x32, random crop (padding 4) + flip, 2 workers"
"$ddpx" run 2 --threads_per_worker 1 --tee none -- bench train --data fashion-mnist $common --json "$out/ddpx_fm" >/dev/null
"$ddpx" run 2 --threads_per_worker 1 --tee none -- bench train --loop phases --data fashion-mnist $common --json "$out/ddpx_fm_phases" >/dev/null
port=$(free_port)
for r in 0 1; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    $py bench/pytorch_train.py --data fashion-mnist --threads 1 --workers 1 --batch_size $batch --steps "$steps" --warmup "${WARMUP:-5}" --json "$out/pt_fm" >/dev/null &
done
wait
$py - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
a = json.loads(open(os.path.join(d, "ddpx_fm")).readline()); b = json.loads(open(os.path.join(d, "pt_fm")).readline())
split = json.loads(open(os.path.join(d, "ddpx_fm_phases")).readline())
print(f"ddpx {a['images_per_sec']:.1f} img/s | pytorch DDP + DataLoader {b['images_per_sec']:.1f} img/s | ratio {a['images_per_sec']/b['images_per_sec']:.2f}x")
print(f"ddpx data wait (--loop phases) {split['data_wait_ms']:.2f} ms of {split['step_ms']:.1f} ms per step ({100*split['data_wait_ms']/split['step_ms']:.2f}%)")
PY
