#!/usr/bin/env bash
# Pipeline parallel beside PyTorch, in one run (docs/performance.md, "Pipeline"): ddpx train's
# loop with --pipeline_parallel P under GPipe, 1F1B and interleaved 1F1B (V stages a rank), and
# torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B and ScheduleInterleaved1F1B on
# torchvision's model cut where ddpx cut it (ddpx's stage table gives the cut), on the same
# ranks, batch, micro-batches and synthetic data, CPU and Gloo: images/s, rank 0's peak
# resident memory, ddpx's bubble (each rank's idle share over the timed steps; PyTorch measures
# none), and the most activations a rank held at once (ddpx: `bench memory`'s activation_bytes,
# what its forwards added and still held as a backward started; PyTorch: the tensors its
# forwards saved for backward, from first save to last use, by autograd's saved-tensor hooks).
# Each configuration runs alone, one after the other. REPLICAS=R > 1 runs ddpx's stages x R
# data-parallel replicas (RANKS x R workers, BATCH a replica, the replicas' gradient averaging
# in the bubble line) and no PyTorch rows: its script runs one replica.
# ROUNDS=N repeats every configuration N times, each schedule's ddpx run (and its bench memory)
# and then the peer's on ddpx's cut of that round, so a loaded machine's drift falls on both:
# every round's rows, then the median of each configuration's figures over the rounds (each
# rank's bubble too), the summary lines from the medians, and each images/s ratio's value in
# every round with their spread (min-max).
# Usage: bench/compare_pipeline.sh [steps]   (BUILD=build; MODEL=resnet18 (a ResNet), SIZE=32,
#        BATCH=32, RANKS=2 (the stages), REPLICAS=1, MICRO=4, V=2 (interleaved), STEPS=20,
#        WARMUP=3, SCHEDULES="gpipe 1f1b interleaved", ROUNDS=1)
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-${STEPS:-20}}"
model="${MODEL:-resnet18}"; size="${SIZE:-32}"; batch="${BATCH:-32}"; ranks="${RANKS:-2}"
micro="${MICRO:-4}"; warmup="${WARMUP:-3}"; v="${V:-2}"; replicas="${REPLICAS:-1}"
rounds="${ROUNDS:-1}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_pipeline: ROUNDS=$rounds: expected a positive integer" >&2; exit 2; }
rounds_note=""; [ "$rounds" = 1 ] || rounds_note=", $rounds interleaved rounds"
workers=$(( ranks * replicas ))
schedules="${SCHEDULES:-gpipe 1f1b interleaved}"
threads=$(( $(nproc) / workers > 0 ? $(nproc) / workers : 1 ))

machine_line
echo "# $model, ${size}x$size synthetic images, 10 classes, batch $batch in $micro micro-batches, $ranks stages x $threads thread(s), SGD momentum, $steps steps after $warmup${rounds_note}"
echo "# $replicas data-parallel replica(s) of the stages: $workers workers"
echo "# interleaved: $v stages a rank"
per_rank() { if [ "$1" = interleaved ]; then echo "$v"; else echo 1; fi; }
# ddpx's cut: the layer count of each stage row of its table ("stem .. layer4.0 (8)" or one name).
cut_of() {
  $py - "$1" <<'PY'
import re, sys
bounds = [0]
for line in open(sys.argv[1]):
    m = re.match(r"\s+\d+\s+[\d,]+\s+(.*?)\s{2,}\d+", line)
    if m:
        n = re.search(r"\((\d+)\)$", m.group(1).strip())
        bounds.append(bounds[-1] + (int(n.group(1)) if n else 1))
print(",".join(map(str, bounds)))
PY
}
for round in $(seq 1 "$rounds"); do
  in_round=""; [ "$rounds" = 1 ] || in_round=" in round $round"
  for schedule in $schedules; do
    name="$schedule.$round"
    "$ddpx" run "$workers" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
      train --model "$model" --image_size "$size" --batch_size "$batch" --steps "$steps" \
      --warmup "$warmup" --no_augment --pipeline_parallel "$ranks" --microbatches "$micro" --pipeline_schedule "$schedule" \
      --stages_per_rank "$(per_rank "$schedule")" --json "$out/ddpx_$name" > "$out/ddpx_$name.log" 2>&1
    "$ddpx" run "$workers" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
      memory --model "$model" --image_size "$size" --batch_size "$batch" --num_classes 10 \
      --pipeline_parallel "$ranks" --microbatches "$micro" --pipeline_schedule "$schedule" \
      --stages_per_rank "$(per_rank "$schedule")" --json > "$out/ddpx_$name.memory" 2>/dev/null
    [ "$replicas" = 1 ] || continue
    cut=$(cut_of "$out/ddpx_$name.log")
    echo "# ddpx's cut for $schedule$in_round (first layer of each stage): $cut"
    memory_cut=$(cut_of "$out/ddpx_$name.memory")
    [ "$memory_cut" = "$cut" ] || echo "# note: ddpx's bench memory timed its layers and cut at $memory_cut, so its $schedule activations$in_round are not the same stages' as PyTorch's"
    port=$(free_port)
    for r in $(seq 0 $((ranks - 1))); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
        $py bench/pytorch_train.py --model "$model" --image_size "$size" --batch_size "$batch" \
        --steps "$steps" --warmup "$warmup" --threads "$threads" --workers 1 --no_augment \
        --pipeline "$ranks" --schedule "$schedule" --stages_per_rank "$(per_rank "$schedule")" \
        --microbatches "$micro" --pipeline_cut "$cut" \
        --json "$out/pt_$name" >/dev/null 2>"$out/pt_$name.$r.err" &
    done
    wait
  done
done
$py - "$out" "$rounds" $schedules <<'PY'
import json, math, os, re, statistics, sys
d, rounds, schedules = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
nan = float("nan")
def row(name):
    return json.loads(open(os.path.join(d, name)).readline())
def activations(name):  # ddpx: the most over the ranks, from bench memory's lines
    path = os.path.join(d, name + ".memory")
    lines = [json.loads(l) for l in open(path) if l.startswith("{")] if os.path.exists(path) else []
    return max(l["activation_bytes"] for l in lines) / 2**20 if lines else nan
peer = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B"}
rows = [(f"ddpx --pipeline_schedule {s}", f"ddpx_{s}") for s in schedules]
rows += [(f"pytorch pipelining {peer[s]}", f"pt_{s}") for s in schedules
         if os.path.exists(os.path.join(d, f"pt_{s}.1"))]
def figures(f, k):  # one configuration's figures in round k
    x = row(f"{f}.{k}")
    act = x.get("activation_mib", nan) if f.startswith("pt_") else activations(f"{f}.{k}")
    summary = x.get("plan_summary", "")
    bubble = summary.split("by rank: ")[-1].split(";")[0] if f.startswith("ddpx_") else "not measured"
    if "gradient averaging" in summary:
        bubble += "; averaging waited for " + summary.split("forward and backward): ")[-1]
    return {"images_per_sec": x["images_per_sec"], "step_ms": x["step_ms"],
            "peak_rss_mib": x["peak_rss_mib"], "activations": act, "bubble": bubble}
def median(values):
    values = list(values)
    return nan if any(math.isnan(v) for v in values) else statistics.median(values)
def median_text(texts):  # the bubble's text, each number that differs over the rounds their median
    parts = [re.split(r"(\d+(?:\.\d+)?)", t) for t in texts]
    if len({len(p) for p in parts}) != 1 or any(len(set(p)) > 1 for p in list(zip(*parts))[::2]):
        return texts[-1] + f" (round {len(texts)})"
    merged = []
    for i, pieces in enumerate(zip(*parts)):
        if i % 2 == 0 or len(set(pieces)) == 1:
            merged.append(pieces[0])
        else:
            decimals = len(pieces[0].partition(".")[2])
            merged.append(f"{statistics.median(map(float, pieces)):.{decimals}f}")
    return "".join(merged)
per_round = [{f: figures(f, k) for _, f in rows} for k in range(1, rounds + 1)]
r = {f: {x: median(rr[f][x] for rr in per_round) for x in ("images_per_sec", "step_ms", "peak_rss_mib", "activations")}
     for _, f in rows}
for _, f in rows:
    r[f]["bubble"] = median_text([rr[f]["bubble"] for rr in per_round])
def table(figures):
    for label, f in rows:
        x = figures[f]
        print(f"  {label:<44} {x['images_per_sec']:8.1f} {x['step_ms']:8.1f} {x['peak_rss_mib']:13.0f} "
              f"{x['activations']:16.1f}  {x['bubble']}")
print(f"# {'configuration':<44} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13} {'activations MiB':>16}  bubble")
if rounds > 1:
    for k, rr in enumerate(per_round, 1):
        print(f"# round {k}")
        table(rr)
    print(f"# median of {rounds} rounds")
table(r)
for s in schedules:
    if f"pt_{s}" not in r:
        continue
    a, b = r[f"ddpx_{s}"], r[f"pt_{s}"]
    spread = ""
    if rounds > 1:
        ratios = [rr[f"ddpx_{s}"]["images_per_sec"] / rr[f"pt_{s}"]["images_per_sec"] for rr in per_round]
        spread = (f" (rounds {', '.join(f'{x:.2f}x' for x in ratios)}; "
                  f"spread {min(ratios):.2f}x to {max(ratios):.2f}x)")
    print(f"# {s}: ddpx / pytorch images/s {a['images_per_sec'] / b['images_per_sec']:.2f}x, "
          f"rank 0 peak RSS {a['peak_rss_mib'] - b['peak_rss_mib']:+.0f} MiB, "
          f"activations {a['activations'] - b['activations']:+.1f} MiB{spread}")
PY
