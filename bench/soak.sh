#!/usr/bin/env bash
# Soak: `ddpx run N` (8 by default: oversubscribed on a 2-core machine) trains a tiny MLP on
# synthetic data for many small steps while this script samples, every few seconds, the
# resident memory (VmRSS), open file descriptors (/proc/PID/fd) and threads of the launcher and
# of every worker. It prints one row per sample and a verdict: each quantity is compared between
# the first sample after warm-up (a quarter of the run) and the last one.
#   Usage: bench/soak.sh [workers=8] [epochs=20] [steps_per_epoch=500]
#   Env: BUILD=build (the build folder), INTERVAL=5 (seconds), RSS_SLACK_KB=4096 (per process)
# Total steps = epochs * steps_per_epoch (every rank takes each step). Exit 0 when flat, 1 when
# something grew or the job failed.
# No `set -e`: a worker may exit between listing it and reading its /proc entries.
set -uo pipefail
cd "$(dirname "$0")/.."
workers="${1:-8}"
epochs="${2:-20}"
steps="${3:-500}"
ddpx="${BUILD:-build}/src/ddpx"
interval="${INTERVAL:-5}"
slack_kb="${RSS_SLACK_KB:-4096}"
batch=4
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
: >"$out/samples"

# The epoch holds workers * batch * steps images: each rank's shard gives `steps` batches.
"$ddpx" run "$workers" --threads_per_worker 1 --tee none --log_dir "$out/log" -- \
  train --model mlp --dataset synthetic --synthetic_size $((workers * batch * steps)) \
  --synthetic_image 8 --synthetic_classes 4 --batch_size "$batch" --num_epochs "$epochs" \
  --optimizer sgd --lr 0.01 --threads 1 --loader_workers 1 --limit_test_batches 1 \
  --log_every "$epochs" --metrics_json "$out/metrics.jsonl" >"$out/console" 2>&1 &
launcher=$!

kb() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status" 2>/dev/null; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) ddpx run $workers: mlp, synthetic 8x8, batch $batch," \
     "$epochs epochs x $steps steps, on $(nproc) cores"
echo "# t_s: seconds; L: launcher; W: summed over workers; rss in KiB"
printf "# %5s %8s %5s %4s %3s %9s %9s %6s %6s\n" t_s L_rss L_fd L_thr W_n W_rss W_rss_max W_fd W_thr
samples="$out/samples"
start=$(date +%s)
while kill -0 "$launcher" 2>/dev/null; do
  pids=$(pgrep -P "$launcher" || true)
  n=0; rss=0; rss_max=0; fd=0; thr=0
  for p in $pids; do
    r=$(kb "$p" VmRSS); f=$(fds "$p"); t=$(kb "$p" Threads)
    [ -z "$r" ] || [ -z "$t" ] && continue
    n=$((n + 1)); rss=$((rss + r)); fd=$((fd + f)); thr=$((thr + t))
    [ "$r" -gt "$rss_max" ] && rss_max=$r
  done
  lr=$(kb "$launcher" VmRSS); lf=$(fds "$launcher"); lt=$(kb "$launcher" Threads)
  if [ -n "$lr" ] && [ "$n" -eq "$workers" ]; then
    row=$(printf "%7d %8d %5d %4d %3d %9d %9d %6d %6d" $(( $(date +%s) - start )) \
          "$lr" "$lf" "$lt" "$n" "$rss" "$rss_max" "$fd" "$thr")
    echo "$row" | tee -a "$samples"
  fi
  sleep "$interval"
done
status=0
wait "$launcher"
status=$?
elapsed=$(( $(date +%s) - start ))
epochs_done=$(wc -l <"$out/metrics.jsonl" 2>/dev/null || echo 0)
echo "# job exit status $status after ${elapsed}s; epochs done: $epochs_done, optimizer steps" \
     "per rank: $((epochs_done * steps))"
if [ "$status" -ne 0 ]; then
  tail -n 20 "$out/console"
  echo "# verdict: FAILED (the job did not finish)"
  exit 1
fi
count=$(wc -l <"$samples")
if [ "$count" -lt 4 ]; then
  echo "# verdict: too few samples ($count); run longer or lower INTERVAL"
  exit 1
fi
# Warm-up: the first quarter of the samples (allocator pools and thread pools fill up).
warm=$(sed -n "$(( count / 4 + 1 ))p" "$samples")
last=$(tail -n 1 "$samples")
awk -v w="$warm" -v l="$last" -v n="$workers" -v slack="$slack_kb" 'BEGIN {
  split(w, a); split(l, b)
  names[2] = "launcher rss"; names[3] = "launcher fds"; names[4] = "launcher threads";
  names[6] = "workers rss"; names[8] = "workers fds"; names[9] = "workers threads";
  grew = 0
  split("2 3 4 6 8 9", order, " ")
  for (k = 1; k <= 6; ++k) {
    i = order[k]
    d = b[i] - a[i]
    allowed = 0
    if (i == 2) allowed = slack
    if (i == 6) allowed = slack * n
    verdict = d > allowed ? "GROWING" : "flat"
    if (d > allowed) grew = 1
    printf "# %-16s after warm-up %9d  end %9d  change %+8d  %s\n", names[i], a[i], b[i], d, verdict
  }
  print grew ? "# verdict: GROWING" : "# verdict: flat"
  exit grew
}'
