#!/usr/bin/env bash
# Tensor parallel beside PyTorch, in one run (docs/performance.md, "Tensor parallel"): ddpx
# train's loop with --tensor_parallel T, with and without --sequence_parallel, and PyTorch's
# DTensor tensor parallelism (parallelize_module, ColwiseParallel/RowwiseParallel, torchtitan's
# split, and torchtitan's SequenceParallel; bench/pytorch_tensor_parallel.py) on a ViT of the same
# shape, on the same T ranks, batch and synthetic data, CPU and Gloo: images/s, step time, rank
# 0's peak resident memory, and each rank's activations (ddpx's `bench memory`: the tensor bytes
# a forward adds and still holds when its backward starts; the peer: the tensors its forward
# saves for backward, by autograd's saved-tensor hooks; the most over the ranks). Each configuration runs alone, one after the other. DTensor's sequence
# parallelism fails in backward when T does not divide the tokens (PyTorch 2.11); its row then
# says so.
# ROUNDS=N repeats every configuration N times, ddpx's (its run and bench memory) and then the
# peer's, without and then with sequence parallelism, in each round, so a loaded machine's drift
# falls on both: every round's rows, then the median of each configuration's figures over the
# rounds (over the rounds it ran in, if it failed in some), the summary lines from the medians,
# and each images/s ratio's value in every round with their spread (min-max).
# Usage: bench/compare_tensor_parallel.sh [steps]   (BUILD=build; MODEL=vit_tiny_patch4_32,
#        SIZE=the model's, BATCH=32, RANKS=3 (T; the model's heads must divide by it), STEPS=10,
#        WARMUP=2, ROUNDS=1). vit_b_16 at SIZE=112 (50 tokens) with RANKS=2 runs every row.
set -euo pipefail
source "$(dirname "$0")/common.sh"
steps="${1:-${STEPS:-10}}"
model="${MODEL:-vit_tiny_patch4_32}"; batch="${BATCH:-32}"; ranks="${RANKS:-3}"
warmup="${WARMUP:-2}"; size="${SIZE:-}"; rounds="${ROUNDS:-1}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_tensor_parallel: ROUNDS=$rounds: expected a positive integer" >&2; exit 2; }
rounds_note=""; [ "$rounds" = 1 ] || rounds_note=", $rounds interleaved rounds"
threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))
ddpx_size=${size:+--image_size $size}

machine_line
echo "# $model, synthetic ${size:-model-size} images, 10 classes, batch $batch, $ranks tensor-parallel ranks x $threads thread(s), SGD momentum, $steps steps after $warmup${rounds_note}"
for round in $(seq 1 "$rounds"); do
  for sequence in "" "--sequence_parallel"; do
    name="ddpx${sequence:+_sequence}.$round"
    "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
      train --model "$model" $ddpx_size --batch_size "$batch" --steps "$steps" --warmup "$warmup" \
      --no_augment --tensor_parallel "$ranks" $sequence --json "$out/$name" > "$out/$name.log" 2>&1
    "$ddpx" run "$ranks" --threads_per_worker "$threads" --tee 0 --log_dir "$out/log" -- bench \
      memory --model "$model" $ddpx_size --batch_size "$batch" --num_classes 10 \
      --tensor_parallel "$ranks" $sequence --json > "$out/$name.memory" 2> "$out/$name.memory.log"
    name="pytorch${sequence:+_sequence}.$round"
    port=$(free_port)
    for r in $(seq 0 $((ranks - 1))); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=$threads \
        $py bench/pytorch_tensor_parallel.py --model "$model" ${size:+--image_size $size} \
        --batch_size "$batch" --steps "$steps" --warmup "$warmup" --threads "$threads" $sequence \
        --json "$out/$name" >/dev/null 2>"$out/$name.$r.err" &
    done
    wait || true  # a failed peer leaves no line; its row says so
  done
done
$py - "$out" "$rounds" <<'PY'
import json, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def row(name):
    path = os.path.join(d, name)
    return json.loads(open(path).readline()) if os.path.exists(path) else None
def activations(name):  # ddpx: the most over the ranks, from bench memory's lines
    path = os.path.join(d, name + ".memory")
    lines = [json.loads(l) for l in open(path) if l.startswith("{")] if os.path.exists(path) else []
    return max(l["activation_bytes"] for l in lines) / 2**20 if lines else None
rows = [("ddpx --tensor_parallel", "ddpx"), ("ddpx --tensor_parallel --sequence_parallel", "ddpx_sequence"),
        ("pytorch DTensor (ColwiseParallel/RowwiseParallel)", "pytorch"),
        ("pytorch DTensor with SequenceParallel", "pytorch_sequence")]
def figures(name, k):  # one configuration's figures in round k, None where it failed
    r = row(f"{name}.{k}")
    if r is not None:
        r["activations"] = r.get("activation_mib") if name.startswith("pytorch") else activations(f"{name}.{k}")
    return r
def failure(name, k):
    err = [l.strip() for l in open(os.path.join(d, f"{name}.{k}.0.err")) if "Error" in l]
    return (f"failed: {err[-1] if err else '?'}"
            + (" (DTensor's sequence parallel wants T to divide the tokens)" if "sequence" in name else ""))
def median(name):  # the median over the rounds it ran in, None if it failed in all
    ran = [rr[name] for rr in per_round if rr[name] is not None]
    if not ran:
        return None
    m = {x: statistics.median(r[x] for r in ran) for x in ("images_per_sec", "step_ms", "peak_rss_mib")}
    acts = [r["activations"] for r in ran if r["activations"] is not None]
    m["activations"] = statistics.median(acts) if acts else None
    m["rounds"] = len(ran)
    return m
def table(figures, k):  # k: the round whose failure a failed row shows
    for label, name in rows:
        r = figures[name]
        if r is None:
            print(f"  {label:<50} {failure(name, k)}")
            continue
        act = r["activations"]
        ran = f"  ({r['rounds']} of {rounds} rounds)" if r.get("rounds", rounds) < rounds else ""
        print(f"  {label:<50} {r['images_per_sec']:8.1f} {r['step_ms']:8.1f} {r['peak_rss_mib']:13.0f} "
              f"{act if act is not None else float('nan'):16.1f}{ran}")
per_round = [{name: figures(name, k) for _, name in rows} for k in range(1, rounds + 1)]
medians = {name: median(name) for _, name in rows}
print(f"# {'configuration':<50} {'img/s':>8} {'step ms':>8} {'peak RSS MiB':>13} {'activations MiB':>16}")
if rounds > 1:
    for k, rr in enumerate(per_round, 1):
        print(f"# round {k}")
        table(rr, k)
    print(f"# median of {rounds} rounds")
table(medians, rounds)
def spread(ours, theirs):  # with several rounds: the images/s ratio in each round and their min-max
    ratios = [rr[ours]["images_per_sec"] / rr[theirs]["images_per_sec"] for rr in per_round
              if rr[ours] is not None and rr[theirs] is not None]
    if rounds == 1 or not ratios:
        return ""
    return (f" (rounds {', '.join(f'{x:.2f}x' for x in ratios)}; "
            f"spread {min(ratios):.2f}x to {max(ratios):.2f}x)")
for ours, theirs in (("ddpx", "pytorch"), ("ddpx_sequence", "pytorch_sequence")):
    a, b = medians[ours], medians[theirs]
    if a and b:
        print(f"# {ours} / {theirs}: images/s {a['images_per_sec'] / b['images_per_sec']:.2f}x, "
              f"activations {a['activations'] - b['activations']:+.1f} MiB{spread(ours, theirs)}")
for tool in ("ddpx", "pytorch"):
    a, b = medians[tool], medians[tool + "_sequence"]
    if a and b:
        print(f"# {tool}: sequence parallel holds {a['activations'] - b['activations']:.1f} MiB "
              f"less activations a rank")
PY
