#!/usr/bin/env bash
# PowerSGD's accuracy against plain averaging (issue #27's target, docs/performance.md
# "PowerSGD's accuracy"): `ddpx run 2 -- train` on the embedded Fashion-MNIST, the same seed,
# model, batch and schedule, once with --comm_hook allreduce and once with --comm_hook powersgd,
# one after the other; prints each epoch's test accuracy from --metrics_json, the traffic cut
# once compressing, and whether PowerSGD ends within 0.3 points of plain averaging with at least
# 50x less gradient traffic.
# Usage: bench/powersgd_accuracy.sh   (BUILD=build; MODEL=resnet18, EPOCHS=5, BATCH=128 a rank,
#        RANKS=2, RANK_R=2, START=100 (plain steps first), LR=0.05, SEED=0,
#        HOOKS="allreduce powersgd": HOOKS=powersgd runs only the compressed arm, against the
#        plain arm's final accuracy given as BASELINE=0.9222 (a run of the same seed and epochs))
set -euo pipefail
source "$(dirname "$0")/common.sh"
model="${MODEL:-resnet18}"; epochs="${EPOCHS:-5}"; batch="${BATCH:-128}"; ranks="${RANKS:-2}"
rank_r="${RANK_R:-2}"; start="${START:-100}"; lr="${LR:-0.05}"; seed="${SEED:-0}"
hooks="${HOOKS:-allreduce powersgd}"
if [[ $hooks != *allreduce* && -z ${BASELINE:-} ]]; then
  echo "powersgd_accuracy.sh: HOOKS=$hooks leaves out the plain arm; give its final test accuracy as BASELINE=0.9222" >&2
  exit 2
fi

machine_line
echo "# $model on Fashion-MNIST, $ranks ranks x batch $batch, SGD momentum 0.9, lr $lr cosine, $epochs epochs, seed $seed; PowerSGD rank $rank_r from step $start"
for hook in $hooks; do
  flags=(--comm_hook "$hook")
  [[ $hook == powersgd ]] && flags+=(--powersgd_rank "$rank_r" --powersgd_start_iter "$start")
  start_s=$(date +%s)
  "$ddpx" run "$ranks" --log_dir "$out/log_$hook" -- \
    train --model "$model" --num_epochs "$epochs" --batch_size "$batch" --optimizer sgd \
    --momentum 0.9 --learning_rate "$lr" --lr_schedule cosine --seed "$seed" --no_progress \
    --metrics_json "$out/$hook.jsonl" "${flags[@]}" > "$out/$hook.log" 2>&1 ||
    { tail -20 "$out/$hook.log"; exit 1; }
  echo "# $hook: $(( $(date +%s) - start_s )) s"
done
$py - "$out" "${BASELINE:-}" <<'PY'
import json, os, sys
d, baseline = sys.argv[1], sys.argv[2]
runs = {h: [json.loads(l) for l in open(os.path.join(d, h + ".jsonl"))]
        for h in ("allreduce", "powersgd") if os.path.exists(os.path.join(d, h + ".jsonl"))}
if "allreduce" not in runs:  # HOOKS=powersgd: the plain arm's final accuracy from BASELINE
    runs["allreduce"] = [{"epoch": p["epoch"], "accuracy_test": float("nan")} for p in runs["powersgd"]]
    runs["allreduce"][-1]["accuracy_test"] = float(baseline)
print(f"# {'epoch':>5} {'allreduce test acc':>19} {'powersgd test acc':>18} {'powersgd s/epoch':>17}")
for a, p in zip(runs["allreduce"], runs["powersgd"]):
    print(f"  {a['epoch']:>5} {a['accuracy_test']:19.4f} {p['accuracy_test']:18.4f} {p['time_s']:17.1f}")
a, p = runs["allreduce"][-1], runs["powersgd"][-1]
gap = (a["accuracy_test"] - p["accuracy_test"]) * 100
ratio = p["powersgd_ratio"]
ok = gap <= 0.3 and ratio >= 50
print(f"# final: allreduce {a['accuracy_test']:.4f}, powersgd {p['accuracy_test']:.4f} "
      f"({gap:+.2f} points behind); {ratio:.1f}x less gradient traffic over "
      f"{p['powersgd_compressed_steps']:.0f} compressed steps; target (within 0.3 points, "
      f"at least 50x): {'met' if ok else 'NOT met'}")
PY
