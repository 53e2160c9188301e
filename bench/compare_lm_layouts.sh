#!/usr/bin/env bash
# A GPT split across CPU ranks, ddpx beside PyTorch's own layouts, interleaved in one run
# (docs/performance.md, "Language models"): the same GPT (bench/pytorch_gpt.py: nanoGPT's model
# with ddpx's math), global batch, steps, AdamW, clipping and loss on both sides, ranks of one
# thread over ddpx's transport / Gloo:
#   TP2      ddpx --tensor_parallel 2 | DTensor parallelize_module (torchtitan's GPT plan:
#            ColwiseParallel q/k/v and c_fc, RowwiseParallel c_projs, the embedding and its tied
#            head split over the vocabulary, loss_parallel's cross-entropy)
#   TP2+SP   the same with --sequence_parallel | SequenceParallel on the LayerNorms
#   PP2      ddpx --pipeline_parallel 2 --pipeline_schedule 1f1b | torch.distributed.pipelining
#            (PipelineStage + Schedule1F1B), cut at the same block, 2 x 2 micro-batches, the
#            tied embedding on both stages with its two gradients summed each step on both sides
#   DP2xTP2  4 ranks, ddpx --tensor_parallel 2 --shard full | fully_shard over the data
#            dimension of a 2 x 2 DeviceMesh of DTensor TP (torchtitan's 2-D)
# Under TP both sides pad the vocabulary to ddpx's 128 x T rows (gpt-nano's 65 characters: 256);
# ddpx masks the padded columns out of the loss, the peer's loss_parallel counts them (rows
# never a target): the same FLOPs, a near-same loss. Prints, a layout a line, global tokens/s
# (ddpx's second epoch line: STEPS steps after STEPS; the peer: STEPS timed after STEPS), their
# ratio, the step time and the peak resident memory a rank (the most over the ranks) with its
# ratio (ddpx / pytorch: tokens/s higher is better, memory lower). ddpx's tokens/s are its
# second epoch's tokens over its time (the epoch line's own figure counts every rank's copy).
# ROUNDS=N repeats every layout, ddpx and the peer in turn, so a loaded machine's drift falls on
# both.
# Text: TEXT=FILE, else ../shared/data/tinyshakespeare.txt (characters).
# FORK_PEERS=1 forks the peer's ranks from one Python that imported torch once (pytorch_gpt.py
# --ranks) rather than starting an interpreter a rank: about 3 CPU-s less a rank, for smoke
# runs; a forked rank's peak memory leaves out the pages it shares untouched with its parent, so
# the memory ratios are only fair without it.
# Usage: bench/compare_lm_layouts.sh   (BUILD=build; STEPS=20, BATCH=12, SEQ=64, MODEL=gpt-nano
#        or gpt2, ROUNDS=1, LAYOUTS="tp tp_sp pp dp_tp", KEEP=DIR keeps the logs there)
set -euo pipefail
source "$(dirname "$0")/common.sh"
text="${TEXT:-../shared/data/tinyshakespeare.txt}"
[[ -f "$text" ]] || { echo "compare_lm_layouts: no $text; set TEXT=FILE" >&2; exit 1; }
steps="${STEPS:-20}"; batch="${BATCH:-12}"; seq="${SEQ:-64}"; model="${MODEL:-gpt-nano}"
rounds="${ROUNDS:-1}"; layouts="${LAYOUTS:-tp tp_sp pp dp_tp}"
case "$model" in  # the peer's shape of each ddpx model: layers, heads, width, positions
  gpt-nano) shape="--n_layer 4 --n_head 4 --n_embd 128 --block_size 64" ;;
  gpt2) shape="--n_layer 12 --n_head 12 --n_embd 768 --block_size 1024" ;;
  *) echo "compare_lm_layouts: MODEL=$model: expected gpt-nano or gpt2" >&2; exit 2 ;;
esac
if [[ -n "${KEEP:-}" ]]; then out="$KEEP"; mkdir -p "$out"; fi
machine_line "torch $("$py" -c 'import torch; print(torch.__version__)')"
echo "# $model on $(basename "$text") characters, global batch $batch x $seq tokens a replica, AdamW, clip 1, $steps timed steps after $steps, ranks of 1 thread, $rounds round(s)"
"$ddpx" data tokenize "$text" --tokenizer char --out "$out/data" >/dev/null
vocab=$("$py" -c 'import numpy as np, sys
h = np.fromfile(sys.argv[1], dtype=np.int32, count=256)
t = np.memmap(sys.argv[1], dtype=np.uint16 if h[1] == 1 else np.uint32, mode="r", offset=1024)
print(int(t.max()) + 1)' "$out/data/train.bin")
padded=$(( (vocab + 255) / 256 * 256 ))  # ddpx's padding at T = 2: a multiple of 128 x 2
train="train --model $model --dataset tokens --data_dir $out/data --seq_len $seq \
  --batch_size $batch --optimizer adamw --learning_rate 1e-3 --weight_decay 0.1 \
  --clip_grad_norm 1 --warmup_epochs 0.1 --limit_train_batches $steps --limit_test_batches 1 \
  --eval_batch_size $batch --num_epochs 2 --loader_workers 1 --no_progress --seed 1"
peer="bench/pytorch_gpt.py $shape --data_dir $out/data --seq_len $seq --batch_size $batch \
  --steps $steps --warmup $steps --warmup_steps $((steps / 5))"

# Runs COMMAND with its output in FILE and its peak resident KiB in FILE.rss (the largest
# child's ru_maxrss: ddpx run's largest rank, ddpx's front exec-ing ddpx-torch in its process).
measured() {
  local file="$1"; shift
  $py -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
open(sys.argv[1] + ".rss", "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(r.returncode)' "$file" "$@"
}
for round in $(seq 1 "$rounds"); do
  for layout in $layouts; do
    case "$layout" in  # ranks, ddpx's flags, the peer's flags
      tp) n=2; ours="--tensor_parallel 2"; theirs="--tp 2 --vocab_size $padded" ;;
      tp_sp) n=2; ours="--tensor_parallel 2 --sequence_parallel"
        theirs="--tp 2 --sp --vocab_size $padded" ;;
      pp) n=2; ours="--pipeline_parallel 2 --pipeline_schedule 1f1b --microbatches 4"
        theirs="--pp 2 --schedule 1f1b --microbatches 4" ;;
      dp_tp) n=4; ours="--tensor_parallel 2 --shard full"
        theirs="--fsdp --tp 2 --vocab_size $padded" ;;
      *) echo "compare_lm_layouts: LAYOUTS: $layout: expected tp, tp_sp, pp or dp_tp" >&2; exit 2 ;;
    esac
    measured "$out/ddpx.$layout.$round.log" "$ddpx" run "$n" --threads_per_worker 1 --tee 0 \
      --log_dir "$out/logs" -- $train $ours \
      || { echo "compare_lm_layouts: ddpx failed on $layout:" >&2; tail -n 20 "$out/ddpx.$layout.$round.log" >&2; exit 1; }
    if [[ -n "${FORK_PEERS:-}" ]]; then
      OMP_NUM_THREADS=1 $py $peer $theirs --threads 1 --ranks "$n" --out "$out/pt.$layout.$round" \
        || { echo "compare_lm_layouts: the peer failed on $layout:" >&2; tail -n 5 "$out"/pt.$layout.$round.*.err >&2; exit 1; }
      continue
    fi
    port=$(free_port)
    for r in $(seq 0 $((n - 1))); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        OMP_NUM_THREADS=1 $py $peer $theirs --threads 1 > "$out/pt.$layout.$round.$r.json" \
        2> "$out/pt.$layout.$round.$r.err" &
    done
    wait || { echo "compare_lm_layouts: the peer failed on $layout:" >&2; tail -n 5 "$out"/pt.$layout.$round.*.err >&2; exit 1; }
  done
done
$py - "$out" "$rounds" "$batch" "$seq" "$steps" "$layouts" <<'PY'
import json, os, re, statistics, sys
d, rounds, batch, seq, steps = sys.argv[1], *map(int, sys.argv[2:6])
layouts = sys.argv[6].split()
names = {"tp": ("TP2", 1), "tp_sp": ("TP2 + SP", 1), "pp": ("PP2 1F1B", 1),
         "dp_tp": ("DP2 x TP2, ZeRO-3 / FSDP2", 2)}
def ddpx(layout, r):  # tokens/s from the second epoch's tokens and time, as the peer's
    text = open(os.path.join(d, f"ddpx.{layout}.{r}.log")).read()
    times = re.findall(r"Epoch - [0-9]+/[0-9]+: time - ([0-9.]+)s", text)
    assert len(times) == 2, f"ddpx printed {len(times)} epoch lines:\n{text}"
    rss = int(open(os.path.join(d, f"ddpx.{layout}.{r}.log.rss")).read()) / 1024
    return steps * batch * seq * names[layout][1] / float(times[-1]), rss
def peer(layout, r):
    line = json.loads(open(os.path.join(d, f"pt.{layout}.{r}.0.json")).readline())
    return line["tokens_per_sec"], line["peak_rss_mib_max"]
print(f"# {'layout':<27} {'ddpx tok/s':>10} {'pytorch tok/s':>13} {'ratio':>6} "
      f"{'step ms ddpx / pytorch':>23} {'peak RSS MiB a rank ddpx / pytorch':>35} {'ratio':>6}")
for layout in layouts:
    name, replicas = names[layout]
    ours = [ddpx(layout, r) for r in range(1, rounds + 1)]
    theirs = [peer(layout, r) for r in range(1, rounds + 1)]
    a = statistics.median(t for t, _ in ours); b = statistics.median(t for t, _ in theirs)
    ma = max(m for _, m in ours); mb = max(m for _, m in theirs)
    tokens = batch * seq * replicas
    spread = ""
    if rounds > 1:
        ratios = sorted(x[0] / y[0] for x, y in zip(ours, theirs))
        spread = f"  (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}x)"
    print(f"  {name:<27} {a:10.0f} {b:13.0f} {a / b:5.2f}x {1000 * tokens / a:10.1f} / {1000 * tokens / b:10.1f} "
          f"{ma:17.0f} / {mb:15.0f} {ma / mb:5.2f}x{spread}")
PY
