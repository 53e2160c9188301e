# shellcheck shell=bash
# A real one-node Slurm cluster (munged + slurmctld + slurmd, Debian's slurm-wlm 22.05) for
# tests, brought up in a fresh temp dir with no systemd, no cgroups and no root-owned state
# outside that dir, and torn down (jobs cancelled, daemons and every process of theirs
# stopped, dir removed) when the test exits. Source it; do not run it.
#
#   CLUSTER_TEST_NAME=my_test
#   source tests/cluster/slurm_cluster.sh
#   slurm_cluster_require          # exit 77 (skip) unless munge and Slurm are installed
#   slurm_cluster_start            # exports SLURM_CONF; sets SLURM_CLUSTER_DIR, SLURM_CLUSTER_NODE
#   srun -N1 -n2 hostname
#   slurm_cluster_sbatch job.sh    # submit, wait for the end; SLURM_CLUSTER_JOB_* describe it
#   ddpx_check_sbatch_training job.sh 2   # ... and check it trained as one job of 2 ranks
#
# Packages: munge slurmctld slurmd slurm-client (all in Debian's slurm-wlm).
# Knobs (named outside SLURM_*, which the tests clear):
#   CLUSTER_SLURM_NODE           the node's name (default: this host's short name when it
#                                resolves to loopback, else localhost)
#   CLUSTER_SLURM_CPUS           CPUs the node claims (default 4, more than this machine may
#                                have: SlurmdParameters=config_overrides oversubscribes it)
#   CLUSTER_SLURM_START_TIMEOUT  seconds to wait for the node to be idle (default 30)
#   CLUSTER_KEEP=1               keep the dir, with the daemons' logs, after the test

# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

slurm_cluster_require() {
  cluster_require munged munge
  cluster_require munge munge
  cluster_require unmunge munge
  cluster_require slurmctld slurmctld
  cluster_require slurmd slurmd
  local prog
  for prog in srun sbatch sinfo squeue scontrol scancel; do cluster_require "$prog" slurm-client; done
  [[ $(id -u) == 0 ]] || cluster_skip "the Slurm daemons need root here (SlurmdUser=root); run as root"
}

# Tails of the daemons' logs, for failure messages.
slurm_cluster_dump_logs() {
  local d=${SLURM_CLUSTER_DIR:-}
  [[ -n $d && -d $d ]] || return 0
  echo "----- sinfo / squeue -----"
  timeout 5 sinfo -N -l 2>&1 || true
  timeout 5 squeue -l 2>&1 || true
  local f
  for f in "$d/log/slurmctld.log" "$d/log/slurmd.log" "$d/munge/munged.log"; do
    [[ -f $f ]] || continue
    echo "----- $f (last 25 lines) -----"
    tail -n 25 "$f"
  done
  echo "----- (CLUSTER_KEEP=1 keeps $d) -----"
}

_slurm_cluster_pid() { [[ -s $1 ]] && cat "$1" 2>/dev/null; }

slurm_cluster_stop() {
  local d=${SLURM_CLUSTER_DIR:-} i f pid pids=()
  [[ -n $d && -d $d ]] || return 0
  if [[ -n $(_slurm_cluster_pid "$d/slurmctld.pid") ]]; then
    # Cancel what is left and give slurmd a moment to reap its steps (KillWait is 2 s).
    timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  # The variables naming the dir go first: the processes left are found by it.
  unset SLURM_CONF
  for f in "$d/slurmd.pid" "$d/slurmctld.pid" "$d/munge/munged.pid"; do
    pid=$(_slurm_cluster_pid "$f") && [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  # The daemons (and slurmctld's slurmscriptd) take about 2 s to go; slurmstepd, srun and
  # any task still running are stopped by the tmpdir cleanup, which runs next.
  for ((i = 0; i < 100; i++)); do
    [[ -z $(cluster_pids_using "$d") ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    if cluster_alive "$pid"; then
      cluster_log "daemon pid $pid ignored SIGTERM for 10 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# slurm_cluster_start: bring the cluster up and wait until its node is idle.
slurm_cluster_start() {
  local d node ctld_port slurmd_port i state pid
  cluster_tmpdir
  SLURM_CLUSTER_DIR=$CLUSTER_DIR
  d=$SLURM_CLUSTER_DIR
  cluster_add_cleanup slurm_cluster_stop
  CLUSTER_ON_FAIL=slurm_cluster_dump_logs
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log" "$d/work"

  # munged: own key, socket, pid, log and seed files; -f lets it run as root.
  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  chmod 755 "$d/munge"
  munged -f --key-file="$d/munge/munge.key" --socket="$d/munge/munge.sock" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
    --seed-file="$d/munge/munged.seed" ||
    cluster_fail "munged did not start: $(cluster_show "$d/munge/munged.log")"
  for ((i = 0; i < 100; i++)); do
    [[ -S $d/munge/munge.sock ]] && break
    sleep 0.1
  done
  munge -n -S "$d/munge/munge.sock" | unmunge -S "$d/munge/munge.sock" >/dev/null ||
    cluster_fail "munge credentials do not round-trip through $d/munge/munge.sock"

  # The node is this host under its own name when that name resolves to a loopback address
  # (ddpx takes rank 0's address from SLURM_JOB_NODELIST, and the test's traffic must stay
  # on loopback), else "localhost". CLUSTER_SLURM_NODE forces a name.
  node=${CLUSTER_SLURM_NODE:-$(hostname -s)}
  if [[ -z ${CLUSTER_SLURM_NODE:-} ]]; then
    case $(getent hosts "$node" | awk '{print $1; exit}') in
    127.* | ::1) ;;
    *)
      cluster_log "host name '$node' does not resolve to a loopback address; naming the node localhost"
      node=localhost
      ;;
    esac
  fi
  # shellcheck disable=SC2034  # for the caller
  SLURM_CLUSTER_NODE=$node
  cluster_free_port ctld_port
  cluster_free_port slurmd_port

  cat >"$d/slurm.conf" <<EOF
# Generated by tests/cluster/slurm_cluster.sh: one node, no cgroups, no accounting, root.
ClusterName=ddpxtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
InactiveLimit=0
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=${CLUSTER_SLURM_CPUS:-4} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  cat >"$d/cgroup.conf" <<EOF
# Generated by tests/cluster/slurm_cluster.sh: proctrack/linuxproc and task/none use no cgroup.
CgroupPlugin=autodetect
CgroupAutomount=no
IgnoreSystemd=yes
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
  export SLURM_CONF=$d/slurm.conf

  (cd "$d/log" && slurmctld -f "$SLURM_CONF") ||
    cluster_fail "slurmctld did not start: $(cluster_show "$d/log/slurmctld.log")"
  (cd "$d/log" && slurmd -f "$SLURM_CONF" -N "$node") ||
    cluster_fail "slurmd did not start: $(cluster_show "$d/log/slurmd.log")"

  for ((i = 0; i < ${CLUSTER_SLURM_START_TIMEOUT:-30} * 5; i++)); do
    state=$(timeout 5 sinfo -h -n "$node" -o %T 2>/dev/null || true)
    case $state in
    idle) break ;;
    *inval* | *drain* | *down\**) [[ $i -gt 25 ]] && break ;;
    esac
    for pid in slurmctld slurmd; do
      [[ -s $d/$pid.pid ]] && ! cluster_alive "$(cat "$d/$pid.pid")" &&
        cluster_fail "$pid died while starting"
    done
    sleep 0.2
  done
  [[ $state == idle ]] ||
    cluster_fail "Slurm node '$node' is '${state:-not listed}', not idle, after ${CLUSTER_SLURM_START_TIMEOUT:-30} s"
  cluster_log "Slurm is up in $d: node $node idle, slurmctld :$ctld_port, slurmd :$slurmd_port ($(cluster_elapsed)s)"
}

# _slurm_cluster_field JOBID NAME: one field of `scontrol show job -o`.
# Empty when the job is unknown.
_slurm_cluster_field() {
  { timeout 10 scontrol show job -o "$1" 2>/dev/null || true; } | tr ' ' '\n' |
    awk -v key="$2=" 'index($0, key) == 1 { print substr($0, length(key) + 1); exit }'
}

# slurm_cluster_wait_job JOBID [TIMEOUT_S]: wait until the job has ended (polling
# scontrol, no accounting needed); sets SLURM_CLUSTER_JOB_STATE, SLURM_CLUSTER_JOB_EXIT
# (Slurm's "status:signal") and SLURM_CLUSTER_JOB_STDOUT. Fails the test on timeout.
slurm_cluster_wait_job() {
  local jid=$1 limit=${2:-60} t0 state
  t0=$(date +%s)
  while :; do
    state=$(_slurm_cluster_field "$jid" JobState)
    case $state in
    PENDING | RUNNING | CONFIGURING | COMPLETING | SUSPENDED | REQUEUED | RESIZING | SIGNALING | STAGE_OUT | "") ;;
    *) break ;;
    esac
    if (($(date +%s) - t0 >= limit)); then
      timeout 10 scancel "$jid" 2>/dev/null || true
      cluster_fail "job $jid still '${state:-unknown}' after ${limit} s; cancelled it"
    fi
    sleep 0.2
  done
  SLURM_CLUSTER_JOB_STATE=$state
  SLURM_CLUSTER_JOB_EXIT=$(_slurm_cluster_field "$jid" ExitCode)
  # shellcheck disable=SC2034  # for the caller
  SLURM_CLUSTER_JOB_STDOUT=$(_slurm_cluster_field "$jid" StdOut)
}

# slurm_cluster_submit SCRIPT [SBATCH_ARG...]: sbatch SCRIPT; sets SLURM_CLUSTER_JOB_ID.
slurm_cluster_submit() {
  local script=$1 out
  shift
  [[ -f $script ]] || cluster_fail "no batch script $script"
  out=$(timeout 20 sbatch --parsable "$@" "$script" 2>&1) ||
    cluster_fail "sbatch $script failed: $out"
  SLURM_CLUSTER_JOB_ID=${out%%;*}
  [[ $SLURM_CLUSTER_JOB_ID =~ ^[0-9]+$ ]] || cluster_fail "sbatch $script printed '$out', not a job id"
}

# slurm_cluster_sbatch SCRIPT [TIMEOUT_S] [SBATCH_ARG...]: submit SCRIPT, wait for its end.
# Sets SLURM_CLUSTER_JOB_ID/_STATE/_EXIT/_STDOUT (the output file, %j expanded). Returns 0
# when the job COMPLETED with exit code 0:0, else 1 (the caller decides; the output file
# says why).
slurm_cluster_sbatch() {
  local script=$1 limit=${2:-60}
  shift $(($# >= 2 ? 2 : 1))
  slurm_cluster_submit "$script" "$@"
  slurm_cluster_wait_job "$SLURM_CLUSTER_JOB_ID" "$limit"
  # The batch step writes its output file before the job leaves COMPLETING.
  [[ $SLURM_CLUSTER_JOB_STATE == COMPLETED && $SLURM_CLUSTER_JOB_EXIT == 0:0 ]]
}

# slurm_cluster_job_pids JOBID: processes that still belong to job JOBID of this cluster
# (SLURM_JOB_ID and this SLURM_CONF in their environment: the batch script, srun, the tasks).
slurm_cluster_job_pids() {
  local f pid
  { grep -lszx -- "SLURM_JOB_ID=$1" /proc/[0-9]*/environ || true; } | while read -r f; do
    grep -qszx -- "SLURM_CONF=$SLURM_CONF" "$f" || continue
    pid=${f#/proc/}
    pid=${pid%%/*}
    if cluster_alive "$pid"; then echo "$pid"; fi
  done
}

# slurm_cluster_assert_nothing_left JOBID WHAT: within 5 s no process of job JOBID is left;
# fails the test naming WHAT and the processes otherwise.
slurm_cluster_assert_nothing_left() {
  local i left
  for ((i = 0; i < 50; i++)); do
    left=$(slurm_cluster_job_pids "$1")
    [[ -z $left ]] && return 0
    sleep 0.1
  done
  cluster_fail "$2 left processes: $(ps -o pid,stat,etime,args -p "$(echo "$left" | paste -sd,)" || true)"
}

# ddpx_check_sbatch_training SCRIPT [WORLD] [PORT] [TIMEOUT_S]: submit SCRIPT, a batch script
# whose one step is `srun ddpx train --num_epochs 1 --device cpu ...` of WORLD ranks
# (default 2) meeting at MASTER_PORT=PORT (default: any port), wait for it, and check that
# it COMPLETED and that its output file shows one job of WORLD ranks found from Slurm's
# variables, met at this node, with rank 0's test accuracy. Fails the test otherwise.
# For scripts written by hand or by a generator such as `ddpx sbatch`.
ddpx_check_sbatch_training() {
  local script=$1 world=${2:-2} port=${3:-} limit=${4:-60}
  slurm_cluster_sbatch "$script" "$limit" ||
    cluster_fail "batch job $SLURM_CLUSTER_JOB_ID of $script ended $SLURM_CLUSTER_JOB_STATE, exit code $SLURM_CLUSTER_JOB_EXIT:
$(cluster_show "$script" "$SLURM_CLUSTER_JOB_STDOUT")"
  [[ -f $SLURM_CLUSTER_JOB_STDOUT ]] ||
    cluster_fail "batch job $SLURM_CLUSTER_JOB_ID completed but left no output file '$SLURM_CLUSTER_JOB_STDOUT'"
  ddpx_assert_trained "$SLURM_CLUSTER_JOB_STDOUT" "$world" slurm "$SLURM_CLUSTER_NODE" "$port"
}

# The prologue of every Slurm test: skip unless the daemons can run, find ddpx ($1 or $DDPX),
# clear inherited launcher variables, bring the cluster up, and cd into its work folder. Sets
# work, node, and train: a one-epoch CPU job of well under a second whose --timeout bounds
# every collective, so a rank that goes missing fails the test instead of hanging it.
slurm_cluster_setup() {
  slurm_cluster_require
  cluster_resolve_ddpx "$@"
  cluster_clean_env
  slurm_cluster_start
  work=$SLURM_CLUSTER_DIR/work
  node=$SLURM_CLUSTER_NODE
  cd "$work" || cluster_fail "cannot cd into $work"
  # shellcheck disable=SC2034  # used by the sourcing test
  train=(train --dataset synthetic --model mlp --num_epochs 1 --batch_size 64 --synthetic_size 512
    --threads 1 --device cpu --timeout 30)
}
