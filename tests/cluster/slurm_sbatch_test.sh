#!/usr/bin/env bash
# `ddpx sbatch` against a real Slurm (one node, brought up by slurm_cluster.sh):
#   1. bad input: --time 1:xx and --requeue_signal_s without --save_dir exit 2 with one line
#      naming the flag (and write no script); --submit with no sbatch on PATH fails with one
#      error line naming sbatch and prints no job id.
#   2. ddpx sbatch --ntasks_per_node 2 --time 5 --log_dir D --script S --submit -- train ...
#      prints "Submitted batch job ID"; the job COMPLETED; D/NAME-ID.out shows one job of
#      world size 2 met at MASTER_PORT=20000+ID%20000, and rank 0's test accuracy.
#   3. --requeue_signal_s 60 -- train ... --save_dir C: once the first checkpoint is in C,
#      `scancel --signal=USR1 --batch` (what --signal=B:USR1@60 sends 60 s before the time
#      limit, to the batch shell only) makes the script's trap ask the tasks for a snapshot
#      (SIGUSR2 through srun: a checkpoint mid-epoch, then they stop) and requeue the job
#      (Restarts=1, PENDING); the second run resumes from that snapshot at its epoch and step,
#      trains the rest and reports the test accuracy; D/NAME-ID.out keeps both runs; nothing
#      is left running.
#      A requeued job is not held but waits cred_expire + 1 s (AuthInfo, default 120 s) with
#      Reason=BeginTime, and then for the scheduler's next periodic pass; `scontrol release`
#      does not change that. This test moves its begin time to now (scontrol update
#      StartTime=now), which also starts a scheduling pass: it runs again within a second.
#   4. --submit of a job sbatch rejects (unknown partition): non-zero, sbatch's reason shown.
# Usage: slurm_sbatch_test.sh [PATH_TO_DDPX]   (or DDPX=...). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

CLUSTER_TEST_NAME=slurm_sbatch_test
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/slurm_cluster.sh
source "$here/slurm_cluster.sh"

slurm_cluster_setup "$@"
# About a second per epoch for two ranks on two cores: slow enough to signal it mid-run.
rq_epochs=5
rq_train=(train --dataset synthetic --model resnet20 --num_epochs "$rq_epochs" --batch_size 64
  --synthetic_size 512 --threads 1 --device cpu --timeout 30 --save_dir "$work/ckpt")

# port_in_use PORT: a TCP socket on this machine has PORT as its local port.
port_in_use() {
  local f addr
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $f ]] || continue
    while read -r _ addr _; do
      [[ $addr == *:* && $((16#${addr##*:})) == "$1" ]] && return 0
    done <"$f"
  done
  return 1
}

# The script takes MASTER_PORT=20000+JOBID%20000 and a fresh cluster numbers jobs from 1, so
# two such tests running at once would meet at the same port. Number this cluster's jobs
# from a free port P instead (P in 20000..31999, so job P uses port P and job P+1 port P+1).
first_id=
for ((i = 0; i < 50; i++)); do
  cluster_free_port first_id
  port_in_use $((first_id + 1)) || break
done
echo "FirstJobId=$first_id" >>"$SLURM_CONF"
timeout 10 scontrol reconfigure || cluster_fail "scontrol reconfigure (FirstJobId=$first_id) failed"

# one_error_line FILE PATTERN: FILE is one line, "ddpx: error: ..." matching PATTERN (an ERE).
one_error_line() {
  [[ $(wc -l <"$1") == 1 ]] && grep -qE "^ddpx: error: .*$2" "$1"
}

# --- 1. bad input --------------------------------------------------------------------------
check_usage_error() {
  local what=$1 pattern=$2 rc=0
  shift 2
  "$DDPX" sbatch --script "$work/bad.sbatch" --log_dir "$work/bad-logs" "$@" >bad.out 2>bad.err || rc=$?
  if [[ $rc != 2 || -s bad.out ]] || ! one_error_line bad.err "$pattern"; then
    cluster_fail "ddpx sbatch $*: exited $rc; expected 2 and one error line matching /$pattern/:
$(cluster_show bad.out bad.err)"
  fi
  [[ ! -e $work/bad.sbatch ]] || cluster_fail "ddpx sbatch $* failed but wrote $work/bad.sbatch"
  cluster_pass "$what: exit 2, $(cat bad.err)"
}
check_usage_error "--time 1:xx" "--time '1:xx'" --time 1:xx -- train
check_usage_error "--requeue_signal_s without --save_dir" "--requeue_signal_s .*--save_dir" \
  --requeue_signal_s 60 -- train --model mlp

rc=0
PATH=/nonexistent "$DDPX" sbatch --script "$work/nosbatch.sbatch" --log_dir "$work/nosbatch-logs" \
  --submit -- "${train[@]}" >nosbatch.out 2>nosbatch.err || rc=$?
n=$(grep -c '^ddpx: error: ' nosbatch.err || true)
if [[ $rc == 0 || -s nosbatch.out || $n != 1 ]] || ! grep -qE '^ddpx: error: .*sbatch' nosbatch.err; then
  cluster_fail "ddpx sbatch --submit with no sbatch on PATH: exited $rc; expected a failure with one error line naming sbatch and nothing on stdout:
$(cluster_show nosbatch.out nosbatch.err)"
fi
cluster_pass "--submit with no sbatch on PATH: exit $rc, $(grep '^ddpx: error: ' nosbatch.err)"

# --- 2. ddpx sbatch --submit: one job of world size 2 ----------------------------------------
# submit_generated NAME ARGS...: `ddpx sbatch ARGS --submit`; its stdout must be exactly
# "Submitted batch job ID". Sets jid, script and out (the output file the script names).
submit_generated() {
  local name=$1 rc=0 text
  shift
  script=$work/$name.sbatch
  "$DDPX" sbatch --job_name "$name" --script "$script" --submit "$@" >"$name.submit.out" 2>"$name.submit.err" || rc=$?
  text=$(cat "$name.submit.out")
  [[ $rc == 0 && $text =~ ^Submitted\ batch\ job\ ([0-9]+)$ ]] ||
    cluster_fail "ddpx sbatch --submit ($name) exited $rc; expected one line 'Submitted batch job ID' on stdout:
$(cluster_show "$name.submit.out" "$name.submit.err" "$script")"
  jid=${BASH_REMATCH[1]}
  bash -n "$script" || cluster_fail "the generated $script is not valid bash: $(cluster_show "$script")"
}

# assert_script SCRIPT LINE...: SCRIPT has each LINE (a fixed string) as a whole line.
assert_script() {
  local script=$1 line
  shift
  for line in "$@"; do
    grep -qxF -- "$line" "$script" || cluster_fail "the generated script lacks the line '$line':
$(cluster_show "$script")"
  done
}

# assert_srun SCRIPT TAIL: SCRIPT has one srun line, `srun --kill-on-bad-exit=1 DDPX...TAIL`
# (DDPX as the script quotes it).
assert_srun() {
  local lines
  lines=$(grep '^srun ' "$1" || true)
  [[ $lines != *$'\n'* && $lines == "srun --kill-on-bad-exit=1 "*ddpx*"$2" ]] ||
    cluster_fail "the generated script has no line 'srun --kill-on-bad-exit=1 $DDPX$2':
$(cluster_show "$1")"
}

submit_generated smoke --ntasks_per_node 2 --time 5 --log_dir logs/sbatch -- "${train[@]}"
assert_script "$script" '#SBATCH --nodes=1' '#SBATCH --ntasks-per-node=2' '#SBATCH --time=5' \
  "#SBATCH --output=$work/logs/sbatch/%x-%j.out"
assert_srun "$script" " ${train[*]}"
if grep -qE -- '--requeue|--signal' "$script"; then
  cluster_fail "a script without --requeue_signal_s asks for a requeue or a signal: $(cluster_show "$script")"
fi
slurm_cluster_wait_job "$jid" 60
out=$work/logs/sbatch/smoke-$jid.out
port=$((20000 + jid % 20000))
[[ $SLURM_CLUSTER_JOB_STATE == COMPLETED && $SLURM_CLUSTER_JOB_EXIT == 0:0 ]] ||
  cluster_fail "job $jid ended $SLURM_CLUSTER_JOB_STATE, exit code $SLURM_CLUSTER_JOB_EXIT:
$(cluster_show "$script" "$out")"
[[ $SLURM_CLUSTER_JOB_STDOUT == "$out" && -f $out ]] ||
  cluster_fail "job $jid's output is '$SLURM_CLUSTER_JOB_STDOUT', expected $out (--log_dir/NAME-ID.out)"
grep -qxF "ddpx sbatch: job $jid (restart 0) on $node, master $node:$port" "$out" ||
  cluster_fail "job $jid's output lacks the script's banner (master $node:$port): $(cluster_show "$out")"
ddpx_assert_trained "$out" 2 slurm "$node" "$port"
cluster_pass "ddpx sbatch --submit: job $jid COMPLETED; logs/sbatch/smoke-$jid.out shows world size 2 at $node:$port and the accuracy"

# --- 3. the warning signal requeues the job; the second run resumes ------------------------
submit_generated requeue --ntasks_per_node 2 --time 5 --log_dir "$work/logs" \
  --requeue_signal_s 60 -- "${rq_train[@]}"
assert_script "$script" '#SBATCH --signal=B:USR1@60' '#SBATCH --requeue' 'trap requeue USR1'
assert_srun "$script" " ${rq_train[*]} --resume auto &"
out=$work/logs/requeue-$jid.out
port=$((20000 + jid % 20000))
for ((i = 0; ; i++)); do
  compgen -G "$work/ckpt/checkpoint_epoch*.ddpx" >/dev/null && break
  state=$(_slurm_cluster_field "$jid" JobState)
  [[ $state =~ ^(PENDING|RUNNING|CONFIGURING|)$ ]] ||
    cluster_fail "job $jid ended ($state) before its first checkpoint: $(cluster_show "$out")"
  ((i < 300)) || cluster_fail "job $jid wrote no checkpoint within 60 s: $(cluster_show "$out")"
  sleep 0.2
done
first_ckpt=$(cd "$work/ckpt" && compgen -G 'checkpoint_epoch*.ddpx' | head -n 1)
timeout 10 scancel --signal=USR1 --batch "$jid" || cluster_fail "scancel --signal=USR1 --batch $jid failed"
t0=$(date +%s%N)

# The trap runs `scontrol requeue`: the job is killed (COMPLETING) and comes back PENDING.
for ((i = 0; ; i++)); do
  state=$(_slurm_cluster_field "$jid" JobState)
  restarts=$(_slurm_cluster_field "$jid" Restarts)
  # Restarts counts up when the requeue is asked for, while the old run may still read RUNNING;
  # the requeued run waits PENDING for its begin time (cred_expire + 1 s), so wait for that.
  [[ $restarts == 1 && $state == PENDING ]] && break
  [[ $state =~ ^(PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED|)$ ]] ||
    cluster_fail "after USR1 to its batch shell, job $jid is $state (Restarts=$restarts), not requeued:
$(cluster_show "$script" "$out")"
  ((i < 100)) || cluster_fail "job $jid not requeued 20 s after USR1 to its batch shell (state $state, Restarts=$restarts):
$(cluster_show "$out")"
  sleep 0.2
done
requeue_s=$(cluster_elapsed "$t0")
reason=$(_slurm_cluster_field "$jid" Reason)
eligible=$(_slurm_cluster_field "$jid" EligibleTime)
wait_s=$(($(date -d "$eligible" +%s 2>/dev/null || date +%s) - $(date +%s)))
cluster_pass "USR1 to the batch shell (after $first_ckpt): job $jid requeued in ${requeue_s}s, Restarts=1, $state (Reason=$reason, eligible in ${wait_s}s)"
if [[ $state == PENDING ]]; then
  # The requeued job's begin time is cred_expire + 1 s after the requeue. Its old credential
  # was revoked at the requeue (1 s resolution): let a second pass before it starts again.
  sleep 1
  timeout 10 scontrol update JobId="$jid" StartTime=now ||
    cluster_fail "scontrol update JobId=$jid StartTime=now failed"
fi
slurm_cluster_wait_job "$jid" 60
[[ $SLURM_CLUSTER_JOB_STATE == COMPLETED && $SLURM_CLUSTER_JOB_EXIT == 0:0 ]] ||
  cluster_fail "requeued job $jid ended $SLURM_CLUSTER_JOB_STATE, exit code $SLURM_CLUSTER_JOB_EXIT:
$(cluster_show "$out")"
restarts=$(_slurm_cluster_field "$jid" Restarts)
[[ $restarts == 1 ]] || cluster_fail "job $jid ended with Restarts=$restarts, expected 1: $(cluster_show "$out")"
[[ -f $out ]] || cluster_fail "requeued job $jid left no output file $out"

# The second run: its banner, the resume, the remaining epochs, the accuracy at the end.
second=$work/requeue-second.out
sed -n "/^ddpx sbatch: job $jid (restart 1) on $node, master $node:$port\$/,\$p" "$out" >"$second"
[[ -s $second ]] || cluster_fail "no second run (restart 1) in $out: $(cluster_show "$out")"
# The first run wrote a snapshot at the warning and stopped; the second resumes from it.
snap_re="^Snapshot - epoch ([0-9]+) step ([0-9]+)/[0-9]+: ($work/ckpt/checkpoint_epoch[0-9]+_step[0-9]+\.ddpx)$"
snap_line=$(grep -E "$snap_re" "$out" | head -n 1)
[[ $snap_line =~ $snap_re ]] ||
  cluster_fail "the first run wrote no snapshot at the warning ('Snapshot - epoch E step S/N: $work/ckpt/...'): $(cluster_show "$out")"
snap_epoch=${BASH_REMATCH[1]} snap_step=${BASH_REMATCH[2]} snap_path=${BASH_REMATCH[3]}
grep -qxF "Stopping after the snapshot; resume with --resume $snap_path" "$out" ||
  cluster_fail "the first run did not stop after its snapshot: $(cluster_show "$out")"
[[ -f $snap_path ]] || cluster_fail "the snapshot $snap_path is not there: $(ls -la "$work/ckpt")"
resume_re="^resumed from $snap_path at epoch $snap_epoch step $snap_step \([0-9]+ steps in all\)$"
[[ $(grep -cE "$resume_re" "$second" || true) == 1 ]] ||
  cluster_fail "the second run did not log one 'resumed from $snap_path at epoch $snap_epoch step $snap_step': $(cluster_show "$second")"
resumed=$(grep -E "$resume_re" "$second")
done_epochs=$snap_epoch
((done_epochs >= 1 && done_epochs < rq_epochs)) ||
  cluster_fail "the second run resumed after $done_epochs epochs, expected 1 to $((rq_epochs - 1)): $(cluster_show "$second")"
# The epochs it trained: exactly done_epochs .. rq_epochs-1, in order.
trained=$(sed -nE "s|^Epoch - ([0-9]+)/$rq_epochs: time - .*|\1|p" "$second" | paste -sd' ')
[[ $trained == "$(seq -s ' ' "$done_epochs" $((rq_epochs - 1)))" ]] ||
  cluster_fail "the resumed run trained epochs '$trained', expected $done_epochs..$((rq_epochs - 1)): $(cluster_show "$second")"
[[ $(tail -n 2 "$second" | head -n 1) =~ ^Accuracy\ on\ test\ dataset\ -\ [0-9]+\.[0-9]+$ &&
  $(tail -n 1 "$second") =~ ^Training\ took\ .*\ for\ $((rq_epochs - done_epochs))\ epochs$ ]] ||
  cluster_fail "the resumed run does not end with the test accuracy and 'Training took ... for $((rq_epochs - done_epochs)) epochs':
$(cluster_show "$second")"
[[ -f $work/ckpt/$(printf 'checkpoint_epoch%04d.ddpx' "$rq_epochs") ]] ||
  cluster_fail "no checkpoint of epoch $rq_epochs in $work/ckpt: $(ls -la "$work/ckpt")"
slurm_cluster_assert_nothing_left "$jid" "job $jid (ended)"
cluster_pass "requeued job $jid COMPLETED: $resumed, epochs $done_epochs..$((rq_epochs - 1)) and the accuracy; nothing left"

# Both runs in one output file: Slurm opens it again when the requeued job starts, and
# truncates it unless the job asks for --open-mode=append (or slurm.conf has JobFileAppend=1).
for line in "ddpx sbatch: job $jid (restart 0) on $node, master $node:$port" \
  "--resume auto: no checkpoint in $work/ckpt yet, starting from scratch" \
  "ddpx sbatch: time limit near; snapshot, then requeueing job $jid"; do
  grep -qxF -- "$line" "$out" ||
    cluster_fail "the first run's line '$line' is not in $out: Slurm truncated the output file when the requeued job started again; the script needs '#SBATCH --open-mode=append':
$(cluster_show "$out")"
done
grep -qE "^Epoch - 0/$rq_epochs: time - " "$out" ||
  cluster_fail "the first run's epoch 0 is not in $out: $(cluster_show "$out")"
cluster_pass "logs/requeue-$jid.out keeps both runs (the first run's epochs and requeue, then the resumed run)"

# --- 4. sbatch rejects the job ---------------------------------------------------------------
rc=0
"$DDPX" sbatch --partition nope --script "$work/nope.sbatch" --log_dir "$work/logs" --submit \
  -- "${train[@]}" >nope.out 2>nope.err || rc=$?
if [[ $rc == 0 || -s nope.out ]] || ! grep -qE '^ddpx: error: sbatch .* failed: .*partition' nope.err; then
  cluster_fail "ddpx sbatch --partition nope --submit: exited $rc; expected a failure passing on sbatch's reason:
$(cluster_show nope.out nope.err)"
fi
cluster_pass "--submit of a job sbatch rejects: exit $rc, $(grep '^ddpx: error: ' nope.err)"
