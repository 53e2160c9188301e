#!/usr/bin/env bash
# The image loader's scale claims (issue #52 item 2, docs/performance.md): `ddpx bench loader`
# on a 10k- and a 100k-image folder of small JPEGs (bench/photo_folder.py --side 64: crops of
# scikit-image's photos re-encoded by PIL, in a temporary folder, never committed), each started
# twice: the first start indexes the folder and caches the index, the second reads the cache.
# Printed a row a start: images, index seconds, first batch from process start, peak resident
# memory; then the two claims: the 100k folder's peak memory within 10% of the 10k folder's
# (streaming: no per-image state beyond the index), and its second start reaching its first
# batch in under a second.
# Usage: bench/loader_scale.sh   (BUILD=build by default; SIZES="10000 100000"; WORKERS=2;
#   KEEP=DIR makes the folders once in DIR/fN and reuses them on later runs (their cached index
#   is removed before each first start), since making 100k files takes minutes on a loaded
#   machine)
set -euo pipefail
source "$(dirname "$0")/common.sh"
sizes="${SIZES:-10000 100000}"
workers="${WORKERS:-2}"

machine_line
echo "# bench loader --workers $workers --batch_size 64 --image_size 32 --batches 20 --warmup 2"
printf '#%9s %6s %10s %14s %14s\n' images start index_s first_batch_s peak_rss_MiB
folders="${KEEP:-$out}"
for n in $sizes; do
  if [ -z "${KEEP:-}" ] || [ ! -d "$folders/f$n" ]; then
    rm -rf "$folders/f$n.part"
    $py bench/photo_folder.py "$folders/f$n.part" --images "$n" --side 64 --distinct 512
    mv "$folders/f$n.part" "$folders/f$n"
  fi
  rm -f "$folders/f$n/.ddpx-index"
  for start in first second; do
    "$ddpx" bench loader --dataset imagefolder --data_dir "$folders/f$n" --workers "$workers" \
      --batch_size 64 --image_size 32 --batches 20 --warmup 2 --json "$out/$n.$start.json" \
      > "$out/$n.$start.log"
    $py - "$out/$n.$start.json" "$n" "$start" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"{sys.argv[2]:>10} {sys.argv[3]:>6} {r['index_s']:10.3f} {r['first_batch_s']:14.3f} "
      f"{r['peak_rss_mib']:14.1f}")
PY
  done
done
set -- $sizes
small=$1; large=${!#}
$py - "$out" "$small" "$large" <<'PY'
import json, sys
out, small, large = sys.argv[1:]
def get(n, start):
    return json.loads(open(f"{out}/{n}.{start}.json").read().splitlines()[-1])
a, b = get(small, "second")["peak_rss_mib"], get(large, "second")["peak_rss_mib"]
first = get(large, "second")["first_batch_s"]
print(f"# peak memory, {large} against {small} images (cached index): {b:.1f} / {a:.1f} MiB = "
      f"{b / a:.3f} ({'within' if abs(b / a - 1) <= 0.10 else 'NOT within'} 10%)")
print(f"# second start on {large} images: first batch after {first:.3f} s "
      f"({'under' if first < 1 else 'NOT under'} 1 s)")
PY
