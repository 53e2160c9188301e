#!/usr/bin/env bash
# End to end on an image folder (docs/performance.md): a ResNet trained by 2 data-parallel ranks
# from a folder of real JPEG photographs at ImageNet-like sizes (about 500x375;
# bench/photo_folder.py cuts them from scikit-image's photos into a temporary folder), ddpx
# beside PyTorch DDP with its DataLoader, in one run.
#   ddpx:    `ddpx run 2 -- bench train --dataset imagefolder` (ddpx train's loop; loader threads
#            decoding only the crop at its DCT scale, `--decode fast`, the default), and once
#            more with `--loop phases` for the share of the step spent waiting for data.
#   PyTorch: bench/pytorch_train.py --data imagefolder, two processes started as torchrun starts
#            them (gloo): torchvision's ImageFolder (PIL) + DataLoader(num_workers=W) +
#            DistributedSampler; its data wait is the time each step blocks in next() on the
#            DataLoader's iterator.
# Both: the same model (torchvision's resnet18 layout, ImageNet stem), the same transform
# (RandomResizedCrop(CROP) + horizontal flip + ImageNet normalisation), the same batch per rank,
# SGD (lr 0.01, momentum 0.9, weight decay 5e-4), one compute thread and W loader workers per
# rank, timed over the same steps after the same warmup, synchronised at the window's ends.
# The crop is small (64 by default) so that a step of ResNet-18 takes well under a second on a
# 2-core VM; the decode of each 500x375 JPEG is the same work at any crop, so the data's share of
# the step is larger here than at 224.
# Printed: images/s of each (all ranks) and their ratio; each side's data wait a step and its
# share of the step.
# Usage: bench/compare_image_train.sh   (BUILD=build by default)
#   IMAGES=640 photos; CROP=64; BATCH=16 a rank; STEPS=12 timed; WARMUP=3; WORKERS=1 a rank;
#   MODEL=resnet18. The folder holds every step of the run in one epoch at the defaults.
set -euo pipefail
source "$(dirname "$0")/common.sh"
images="${IMAGES:-640}"
crop="${CROP:-64}"
batch="${BATCH:-16}"
steps="${STEPS:-12}"
warmup="${WARMUP:-3}"
workers="${WORKERS:-1}"
model="${MODEL:-resnet18}"
common="--model $model --image_size $crop --batch_size $batch --steps $steps --warmup $warmup"


machine_line
$py bench/photo_folder.py "$out/photos" --images "$images"
echo "# $images JPEG photos at about 500x375 ($(du -sh "$out/photos" | cut -f1)), $model, RandomResizedCrop($crop) + flip + normalise, batch $batch a rank, 2 ranks"
echo "# both: $steps steps timed after $warmup, 1 compute thread and $workers loader worker(s) a rank (ddpx: threads, pytorch: DataLoader processes)"

ddpx_run() { "$ddpx" run 2 --threads_per_worker 1 --tee none -- bench train --dataset imagefolder \
  --data_dir "$out/photos" $common "$@" >/dev/null; }
# ddpx's first start indexes the folder and caches the index; it is timed like the others
# (the index is built before the window).
ddpx_run --loop trainer --workers "$workers" --json "$out/ddpx"
ddpx_run --loop phases --json "$out/ddpx_phases"
port=$(free_port)
for r in 0 1; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    $py bench/pytorch_train.py --data imagefolder --data_dir "$out/photos" $common --threads 1 \
    --workers "$workers" --json "$out/pt" >/dev/null &
done
wait
$py - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
def read(name): return json.loads(open(os.path.join(d, name)).readline())
a, s, b = read("ddpx"), read("ddpx_phases"), read("pt")
print(f"images/s, 2 ranks: ddpx {a['images_per_sec']:.1f} | pytorch DDP + DataLoader {b['images_per_sec']:.1f} | "
      f"ratio {a['images_per_sec'] / b['images_per_sec']:.2f}x")
print(f"data wait a step: ddpx {s['data_wait_ms']:.1f} ms of {s['step_ms']:.1f} ms "
      f"({100 * s['data_wait_ms'] / s['step_ms']:.1f}%, --loop phases, 1 loader thread) | pytorch "
      f"{b['data_wait_ms']:.1f} ms of {b['step_ms']:.1f} ms ({100 * b['data_wait_ms'] / b['step_ms']:.1f}%, "
      f"{b['workers']} DataLoader worker(s))")
PY
