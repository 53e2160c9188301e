#!/usr/bin/env bash
# ddpx under a real Slurm (one node, brought up by slurm_cluster.sh):
#   1. srun -N1 -n2 ddpx train: both ranks join one job of world size 2 found from Slurm's
#      variables alone (rank 0's address from SLURM_JOB_NODELIST); rank 0 reports accuracy.
#      The same with --pipeline_parallel 2: two stages, the stage table and the bubble.
#   2. a mangled SLURM_JOB_NODELIST fails fast, with one error line per rank naming it.
#   3. an sbatch script in the tutorial's shape (#SBATCH --nodes/--ntasks-per-node/--output;
#      srun ddpx train) completes and its output file shows the training.
#   4. scancel --signal=TERM to a running job's step: ddpx dies, srun exits non-zero.
#   5. scancel --signal=TERM --full (batch script too): the job ends, no process is left.
# Usage: slurm_srun_test.sh [PATH_TO_DDPX]   (or DDPX=...). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

CLUSTER_TEST_NAME=slurm_srun_test
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/slurm_cluster.sh
source "$here/slurm_cluster.sh"

slurm_cluster_setup "$@"
long_train=(train --dataset synthetic --model mlp --num_epochs 100000 --batch_size 64
  --synthetic_size 512 --threads 1 --device cpu --timeout 30 --log_every 1000000)

# --- 1. srun -n2 ---------------------------------------------------------------------------
cluster_free_port port
rc=0
timeout 60 srun --label -N1 -n2 --kill-on-bad-exit=1 --export="ALL,MASTER_PORT=$port" \
  "$DDPX" "${train[@]}" >srun.out 2>srun.err || rc=$?
[[ $rc == 0 ]] || cluster_fail "srun -N1 -n2 ddpx train exited $rc:
$(cluster_show srun.out srun.err)"
cat srun.out srun.err >srun.all
ddpx_assert_trained srun.all 2 slurm "$node" "$port" '0: '
if grep -q '^1: ' srun.all; then
  cluster_fail "rank 1 printed lines (only rank 0 should):
$(cluster_show srun.all)"
fi
cluster_pass "srun -N1 -n2: one job of world size 2 (slurm), rank 0 reported the test accuracy"

# --- 1b. srun -n2 with two pipeline stages --------------------------------------------------
cluster_free_port port
rc=0
timeout 60 srun --label -N1 -n2 --kill-on-bad-exit=1 --export="ALL,MASTER_PORT=$port" \
  "$DDPX" "${train[@]}" --pipeline_parallel 2 --microbatches 4 >pipe.out 2>pipe.err || rc=$?
[[ $rc == 0 ]] || cluster_fail "srun -N1 -n2 ddpx train --pipeline_parallel 2 exited $rc:
$(cluster_show pipe.out pipe.err)"
cat pipe.out pipe.err >pipe.all
ddpx_assert_trained pipe.all 2 slurm "$node" "$port" '0: '
for pattern in 'pipeline: 2 stages on 2 ranks a replica' 'pipeline bubble .* by rank: 0 '; do
  grep -qE "^0: $pattern" pipe.all ||
    cluster_fail "no line matching /$pattern/ from rank 0: $(cluster_show pipe.all)"
done
cluster_pass "srun -N1 -n2 --pipeline_parallel 2: one pipeline of 2 stages (slurm), rank 0 reported the stage table, the bubble and the test accuracy"

# --- 2. mangled SLURM_JOB_NODELIST ---------------------------------------------------------
cluster_free_port port
rc=0
t0=$(date +%s%N)
timeout 30 srun --label -N1 -n2 --export="ALL,MASTER_PORT=$port" \
  env 'SLURM_JOB_NODELIST=node[01-' "$DDPX" "${train[@]}" >bad.out 2>bad.err || rc=$?
took=$(cluster_elapsed "$t0")
[[ $rc != 0 && $rc != 124 ]] || cluster_fail "a mangled SLURM_JOB_NODELIST: srun exited $rc, expected a failure:
$(cluster_show bad.out bad.err)"
for r in 0 1; do
  n=$(grep -c "^$r: ddpx: error: SLURM_JOB_NODELIST='node\[01-' " bad.err || true)
  lines=$(grep -c "^$r: " bad.out bad.err | awk -F: '{s += $NF} END {print s}')
  [[ $n == 1 && $lines == 1 ]] || cluster_fail "rank $r: expected exactly one line, an error naming SLURM_JOB_NODELIST; got $lines line(s):
$(cluster_show bad.out bad.err)"
done
((${took%.*} < 10)) || cluster_fail "a mangled SLURM_JOB_NODELIST took ${took}s to fail (expected < 10 s)"
cluster_pass "a mangled SLURM_JOB_NODELIST fails in ${took}s with one error line per rank naming it"

# --- 3. sbatch, the tutorial's shape -------------------------------------------------------
cluster_free_port port
cat >train.sbatch <<EOF
#!/bin/bash
#SBATCH --job-name=ddpx-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --time=5
#SBATCH --output=$work/train-%j.out
export MASTER_PORT=$port
srun $(printf "%q " "$DDPX" "${train[@]}")
EOF
ddpx_check_sbatch_training "$work/train.sbatch" 2 "$port"
cluster_pass "sbatch --nodes=1 --ntasks-per-node=2: job $SLURM_CLUSTER_JOB_ID COMPLETED, its output shows world size 2"

# --- 4 and 5. scancel --signal=TERM to a running job ---------------------------------------
# start_long_job NAME: submit an sbatch job training for a long time; wait until rank 0
# has printed an epoch (then both ranks are training). Sets jid and out.
start_long_job() {
  local name=$1 i
  cluster_free_port port
  cat >"$name.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=$name
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --time=5
#SBATCH --output=$work/$name-%j.out
export MASTER_PORT=$port
srun $(printf "%q " "$DDPX" "${long_train[@]}")
echo "srun exited \$?"
EOF
  slurm_cluster_submit "$work/$name.sbatch"
  jid=$SLURM_CLUSTER_JOB_ID
  out=$work/$name-$jid.out
  for ((i = 0; i < 150; i++)); do
    grep -q '^Epoch - ' "$out" 2>/dev/null && return 0
    [[ $(_slurm_cluster_field "$jid" JobState) =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] ||
      cluster_fail "job $jid ended before training: $(cluster_show "$out")"
    sleep 0.2
  done
  cluster_fail "job $jid printed no epoch within 30 s: $(cluster_show "$out")"
}

# assert_job_gone JOBID: no process of the job is left a few seconds after its end.
assert_job_gone() {
  local i pids
  for ((i = 0; i < 50; i++)); do
    pids=$(slurm_cluster_job_pids "$1")
    [[ -z $pids ]] && return 0
    sleep 0.1
  done
  cluster_fail "job $1 ended but left processes: $(ps -o pid,stat,etime,args -p "$(echo "$pids" | paste -sd,)" || true)"
}

# 4. Only the step (the ranks) gets SIGTERM: ddpx dies of it and srun reports it.
start_long_job ddpx-term
timeout 10 scancel --signal=TERM "$jid" || cluster_fail "scancel --signal=TERM $jid failed"
slurm_cluster_wait_job "$jid" 30
grep -qE '^srun exited [1-9][0-9]*$' "$out" ||
  cluster_fail "after SIGTERM to its step, job $jid's srun did not exit non-zero:
$(cluster_show "$out")"
grep -qE 'tasks 0-1: (Terminated|Killed)|task [01]: (Terminated|Killed)' "$out" ||
  cluster_fail "after SIGTERM, srun did not report the ranks terminated:
$(cluster_show "$out")"
assert_job_gone "$jid"
cluster_pass "scancel --signal=TERM: both ranks stopped, $(grep -E '^srun exited' "$out"), job $SLURM_CLUSTER_JOB_STATE, nothing left"

# 5. --full: the batch script, srun and the ranks all get SIGTERM.
start_long_job ddpx-term-full
timeout 10 scancel --signal=TERM --full "$jid" || cluster_fail "scancel --signal=TERM --full $jid failed"
slurm_cluster_wait_job "$jid" 30
[[ $SLURM_CLUSTER_JOB_STATE != COMPLETED ]] ||
  cluster_fail "job $jid COMPLETED after SIGTERM --full (exit $SLURM_CLUSTER_JOB_EXIT); expected a failure:
$(cluster_show "$out")"
if grep -q '^Accuracy on test dataset' "$out"; then
  cluster_fail "job $jid kept training to the end after SIGTERM: $(cluster_show "$out")"
fi
assert_job_gone "$jid"
cluster_pass "scancel --signal=TERM --full: job $SLURM_CLUSTER_JOB_STATE (exit code $SLURM_CLUSTER_JOB_EXIT), nothing left"
