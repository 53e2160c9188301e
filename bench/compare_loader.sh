#!/usr/bin/env bash
# ddpx's image loader beside torchvision's ImageFolder + DataLoader, in one run
# (docs/performance.md): the same folder of real JPEG photographs at ImageNet-like sizes (about
# 500x375; bench/photo_folder.py cuts them from scikit-image's photos into a temporary folder),
# the same transform (RandomResizedCrop(224), horizontal flip, to float, ImageNet normalisation),
# batches of 64, no model. ddpx: `ddpx bench loader` (loader threads in one process) in its two
# decode modes, `--decode fast` (the default) and `--decode exact`; PyTorch:
# bench/pytorch_loader.py (PIL, DataLoader worker processes). The three run interleaved, one
# after another at each worker count, so that a shared machine's load falls on all alike.
# Printed, each with the ratio to PyTorch:
#   1. images/s and CPU milliseconds an image at 1 and 2 workers, fast and exact;
#   2. the first batch of a second start (ddpx reads its cached index; ImageFolder rescans): from
#      process start (wall), the loader's own part (from the data set's construction: index,
#      worker threads or processes, the first batch; without the start-up, loading libtorch or
#      importing torch, which on a loaded machine is most of the wall time), and the CPU seconds
#      spent until then (the fair figure on a shared machine);
#   3. memory at 2 workers: peak resident sets summed over the processes, and PSS at the end.
# Usage: bench/compare_loader.sh   (BUILD=build by default)
#   IMAGES=640 photos; BATCH=64; BATCHES=0 timed batches (0: the rest of one epoch); WARMUP=2;
#   WORKERS="1 2" the worker counts compared.
set -euo pipefail
source "$(dirname "$0")/common.sh"
images="${IMAGES:-640}"
batch="${BATCH:-64}"
common="--batch_size $batch --batches ${BATCHES:-0} --warmup ${WARMUP:-2}"
workers="${WORKERS:-1 2}"

machine_line
$py bench/photo_folder.py "$out/photos" --images "$images"
echo "# $images JPEG photos at about 500x375 ($(du -sh "$out/photos" | cut -f1)), batch $batch, RandomResizedCrop(224) + flip + normalise"

# The first start builds ddpx's index (and caches it); the timed runs below are later starts.
"$ddpx" bench loader --data_dir "$out/photos" $common --workers 1 --json "$out/ddpx_first" >/dev/null
for w in $workers; do
  "$ddpx" bench loader --data_dir "$out/photos" $common --workers "$w" --json "$out/ddpx_$w" >/dev/null
  "$ddpx" bench loader --data_dir "$out/photos" $common --workers "$w" --decode exact \
    --json "$out/exact_$w" >/dev/null
  $py bench/pytorch_loader.py --data_dir "$out/photos" $common --workers "$w" --json "$out/pt_$w" >/dev/null
done
$py - "$out" "$workers" <<'PY'
import json, os, sys
d, workers = sys.argv[1], sys.argv[2].split()
def read(name): return json.loads(open(os.path.join(d, name)).readline())
for w in workers:
    a, e, b = read(f"ddpx_{w}"), read(f"exact_{w}"), read(f"pt_{w}")
    print(f"images/s, {w} worker(s): ddpx fast {a['images_per_sec']:.1f} | ddpx exact {e['images_per_sec']:.1f} | "
          f"pytorch {b['images_per_sec']:.1f} | ratio fast {a['images_per_sec']/b['images_per_sec']:.2f}x, "
          f"exact {e['images_per_sec']/b['images_per_sec']:.2f}x")
    print(f"CPU ms an image, {w} worker(s): ddpx fast {a['cpu_ms_per_image']:.2f} | ddpx exact {e['cpu_ms_per_image']:.2f} | "
          f"pytorch {b['cpu_ms_per_image']:.2f} | ratio fast {a['cpu_ms_per_image']/b['cpu_ms_per_image']:.2f}x, "
          f"exact {e['cpu_ms_per_image']/b['cpu_ms_per_image']:.2f}x")
first, a, b = read("ddpx_first"), read(f"ddpx_{workers[0]}"), read(f"pt_{workers[0]}")
print(f"first batch, second start ({workers[0]} worker(s)), from process start: ddpx {a['first_batch_s']:.3f} s "
      f"({a['startup_s']:.3f} s of it start-up: libtorch loaded) | pytorch {b['first_batch_s']:.3f} s "
      f"({b['startup_s']:.3f} s of it start-up: python, torch and torchvision imported) | "
      f"ratio {a['first_batch_s']/b['first_batch_s']:.2f}x")
print(f"first batch, the loader's part (index, workers started, the first batch): ddpx {a['loader_first_batch_s']:.3f} s "
      f"(index read from its cache in {a['index_s']:.3f} s; built in {first['index_s']:.3f} s on the first start) | "
      f"pytorch {b['loader_first_batch_s']:.3f} s (ImageFolder scan {b['index_s']:.3f} s, then DataLoader's worker "
      f"processes) | ratio {a['loader_first_batch_s']/b['loader_first_batch_s']:.2f}x")
print(f"CPU seconds to the first batch (all threads; pytorch: its workers too): ddpx {a['first_batch_cpu_s']:.2f} | "
      f"pytorch {b['first_batch_cpu_s']:.2f} | ratio {a['first_batch_cpu_s']/b['first_batch_cpu_s']:.2f}x")
a, b = read(f"ddpx_{workers[-1]}"), read(f"pt_{workers[-1]}")
print(f"peak resident memory (fast), {workers[-1]} worker(s), summed over {b['processes']} pytorch processes: "
      f"ddpx {a['peak_rss_mib']:.0f} MiB | pytorch {b['peak_rss_mib']:.0f} MiB | ratio {a['peak_rss_mib']/b['peak_rss_mib']:.2f}x")
print(f"PSS at the end, {workers[-1]} worker(s): ddpx {a['pss_mib']:.0f} MiB | pytorch {b['pss_mib']:.0f} MiB | "
      f"ratio {a['pss_mib']/b['pss_mib']:.2f}x")
PY
