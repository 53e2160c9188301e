#!/usr/bin/env bash
# ddpx training a GPT beside its PyTorch eager peer (bench/pytorch_gpt.py, nanoGPT's model and
# loop with the same math), in one run (docs/performance.md, "Language models"): gpt-nano
# (4 layers, 4 heads, 128 wide) on Shakespeare's characters, batch 12 x 64 tokens a rank, AdamW
# (weight decay on matrices), warmup + cosine, gradients clipped at 1, on the CPU:
#   1. one process, THREADS intra-op threads each;
#   2. 2 data-parallel ranks of one thread (ddpx run 2 / the peer's DDP over gloo), RANKS=0 skips.
# Prints tokens/s of each, the ratio, the step time, the model FLOP/s (6N + 12·L·C·T FLOPs a
# token, nanoGPT's and llm.c's count: N the parameters less the position embeddings) and peak
# resident memory (one process; for the ranks, ddpx's largest rank beside the peer's rank 0).
# ddpx's tokens/s are those of its second epoch line (the first is the warm-up, STEPS steps
# each); the peer times STEPS steps after STEPS untimed ones, reading the loss every step as ddpx
# does on a CPU. Data loading: ddpx's loader threads
# (--loader_workers 1), the peer's windows on its own thread (nanoGPT's get_batch).
# Text: TEXT=FILE, else ../shared/data/tinyshakespeare.txt, else where `ddpx data download
# tinyshakespeare` puts it.
# The ranks' run can be ZeRO-3 and recompute blocks: SHARD=full gives ddpx --shard full and the
# peer FSDP2 (fully_shard per block, then the model); AC=1 gives ddpx --activation_checkpointing
# blocks and the peer torch.utils.checkpoint per block. MODEL=gpt2 is GPT-2's 12 layers x 768
# (on the characters' vocabulary) on both sides: the 12-layer comparison of ZeRO-3 and
# checkpointing beside FSDP2, e.g. `MODEL=gpt2 SHARD=full STEPS=10 BATCH=4 bench/compare_lm.sh`.
# FORK_PEERS=1 forks the peer's ranks from one Python that imported torch once (pytorch_gpt.py
# --ranks): about 3 CPU-s less a rank, for smoke runs; a forked rank's peak memory leaves out the
# pages it shares untouched with its parent, so the ranks' memory ratio is only fair without it.
# Usage: bench/compare_lm.sh   (BUILD=build; STEPS=100, THREADS=1, RANKS=2, BATCH=12, SEQ=64,
#        MODEL=gpt-nano, SHARD=, AC=, FORK_PEERS=)
set -euo pipefail
source "$(dirname "$0")/common.sh"
text="${TEXT:-../shared/data/tinyshakespeare.txt}"
[[ -f "$text" || -n "${TEXT:-}" ]] || text=data/tinyshakespeare/input.txt
[[ -f "$text" ]] || { echo "compare_lm: no $text; set TEXT=FILE or run" \
  "\`ddpx data download tinyshakespeare\`" >&2; exit 1; }
steps="${STEPS:-100}"; threads="${THREADS:-1}"; ranks="${RANKS:-2}"
batch="${BATCH:-12}"; seq="${SEQ:-64}"; model="${MODEL:-gpt-nano}"
case "$model" in  # the peer's shape of each ddpx model: layers, heads, width, positions
  gpt-nano) shape="--n_layer 4 --n_head 4 --n_embd 128 --block_size 64" ;;
  gpt2) shape="--n_layer 12 --n_head 12 --n_embd 768 --block_size 1024" ;;
  *) echo "compare_lm: MODEL=$model: expected gpt-nano or gpt2" >&2; exit 2 ;;
esac
ranks_ddpx=""; ranks_peer=""; ranks_name="DDP"
if [[ "${SHARD:-}" == full ]]; then
  ranks_ddpx+=" --shard full"; ranks_peer+=" --fsdp"; ranks_name="ZeRO-3/FSDP2"
elif [[ -n "${SHARD:-}" ]]; then
  echo "compare_lm: SHARD=$SHARD: expected full (or unset)" >&2; exit 2
fi
if [[ -n "${AC:-}" ]]; then
  ranks_ddpx+=" --activation_checkpointing blocks"; ranks_peer+=" --checkpoint"
  ranks_name+=" + AC"
fi
machine_line "torch $("$py" -c 'import torch; print(torch.__version__)')"
echo "# $model on $(basename "$text") characters, batch $batch x $seq tokens a rank, AdamW, $steps timed steps after $steps"
"$ddpx" data tokenize "$text" --tokenizer char --out "$out/data" >/dev/null
train="train --model $model --dataset tokens --data_dir $out/data --seq_len $seq \
  --batch_size $batch --optimizer adamw --learning_rate 1e-3 --weight_decay 0.1 \
  --clip_grad_norm 1 --warmup_epochs 0.1 --limit_train_batches $steps --limit_test_batches 1 \
  --eval_batch_size $batch --num_epochs 2 --loader_workers 1 --no_progress --seed 1"
peer="bench/pytorch_gpt.py $shape --data_dir $out/data --seq_len $seq --batch_size $batch \
  --steps $steps --warmup $steps --warmup_steps $((steps / 5))"

# Runs COMMAND with its output in FILE and its peak resident KiB in FILE.rss (the child's
# ru_maxrss: ddpx's front execs ddpx-torch in the same process).
measured() {
  local file="$1"; shift
  $py -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"))
open(sys.argv[1] + ".rss", "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(r.returncode)' "$file" "$@"
}
measured "$out/ddpx1.log" "$ddpx" $train --threads "$threads"
measured "$out/pt1.json" $py $peer --threads "$threads"
if [ "$ranks" -gt 1 ]; then
  measured "$out/ddpx2.log" "$ddpx" run "$ranks" --threads_per_worker 1 --tee 0 \
    --log_dir "$out/logs" -- $train --batch_size_scaled $ranks_ddpx
  if [[ -n "${FORK_PEERS:-}" ]]; then
    OMP_NUM_THREADS=1 $py $peer $ranks_peer --threads 1 --ranks "$ranks" --out "$out/pt2" \
      || { echo "compare_lm: the peer's ranks failed:" >&2; tail -n 5 "$out"/pt2.*.err >&2; exit 1; }
  else
    port=$(free_port)
    for r in $(seq 0 $((ranks - 1))); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        OMP_NUM_THREADS=1 $py $peer $ranks_peer --threads 1 > "$out/pt2.$r.json" &
    done
    wait
  fi
  cat "$out/pt2.0.json" > "$out/pt2.json"
fi
$py - "$out" "$threads" "$ranks" "$seq" "$batch" "$ranks_name" <<'PY'
import json, os, re, sys
d, threads, ranks, seq, batch = (sys.argv[1], *map(int, sys.argv[2:6]))
ranks_name = sys.argv[6]
def ddpx(name):
    text = open(os.path.join(d, name)).read()
    lines = re.findall(r"tokens_per_sec - ([0-9.]+)", text)
    assert len(lines) == 2, f"ddpx printed {len(lines)} epoch lines:\n{text}"
    return float(lines[-1])
def rss(name):
    return int(open(os.path.join(d, name)).read().split()[-1]) / 1024
peer1 = json.loads(open(os.path.join(d, "pt1.json")).readline())
fpt = peer1["flops_per_token"]
print(f"# {'setting':<34} {'ddpx tok/s':>11} {'pytorch tok/s':>14} {'ratio':>6} {'ddpx GFLOP/s':>13} {'peak RSS MiB ddpx / pytorch':>28}")
a = ddpx("ddpx1.log"); b = peer1["tokens_per_sec"]
print(f"  {'1 process, %d thread%s' % (threads, 's' if threads > 1 else ''):<34} {a:11.0f} {b:14.0f} {a / b:5.2f}x {a * fpt / 1e9:13.2f} {rss('ddpx1.log.rss'):13.0f} / {rss('pt1.json.rss'):.0f}")
if ranks > 1:
    a2 = ddpx("ddpx2.log"); peer2 = json.loads(open(os.path.join(d, "pt2.json")).readline())
    b2 = peer2["tokens_per_sec"]
    print(f"  {'%d %s ranks, 1 thread each' % (ranks, ranks_name):<34} {a2:11.0f} {b2:14.0f} {a2 / b2:5.2f}x {a2 * fpt / 1e9:13.2f} {rss('ddpx2.log.rss'):13.0f} / {peer2['peak_rss_mib']:.0f}")
print(f"# step time, one process: ddpx {1000 * batch * seq / a:.1f} ms | pytorch {peer1['step_ms']:.1f} ms; "
      f"{fpt / 1e6:.2f} MFLOP a token ({peer1['parameters']:,} parameters); pytorch AdamW fused: {peer1['fused_adamw']}")
PY
