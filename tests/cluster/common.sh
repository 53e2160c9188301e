# shellcheck shell=bash
# Helpers shared by the cluster tests in this folder. Source it; do not run it.
#
#   CLUSTER_TEST_NAME=my_test
#   source tests/cluster/common.sh
#   cluster_require mpirun openmpi-bin     # exit 77 (skip) when the program is missing
#   cluster_resolve_ddpx "$@"              # sets DDPX from $1, $DDPX or build/ddpx
#   cluster_clean_env                      # no launcher variables leak in from the caller
#   cluster_tmpdir                         # sets CLUSTER_DIR; removed, with every process using it, at exit
#   ...
#   cluster_pass "what was checked"        # counts a passed check
#   cluster_fail "what went wrong"         # prints it, runs CLUSTER_ON_FAIL, exits 1
#
# At exit the registered cleanups run (last registered first) and a closing line
# "N passed, N failed" is printed. Exit status: 0 pass, 1 fail, 2 usage error, 77 skip.
# CLUSTER_KEEP=1 keeps the temp dir (its path is printed) for a post-mortem.

CLUSTER_TEST_NAME=${CLUSTER_TEST_NAME:-cluster_test}
CLUSTER_PASSED=0
CLUSTER_FAILED=0
CLUSTER_SKIPPED=0
CLUSTER_CLEANUPS=()
CLUSTER_ON_FAIL=${CLUSTER_ON_FAIL:-}
CLUSTER_T0=$(date +%s%N)
# Daemons live in /usr/sbin, which a non-root PATH may lack.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac

cluster_log() { printf '%s: %s\n' "$CLUSTER_TEST_NAME" "$*" >&2; }

# cluster_elapsed [START_NS]: seconds since START_NS (default: since the test started).
# shellcheck disable=SC2120
cluster_elapsed() {
  local ns=$(($(date +%s%N) - ${1:-$CLUSTER_T0}))
  printf '%d.%03d' $((ns / 1000000000)) $((ns / 1000000 % 1000))
}

cluster_skip() {
  cluster_log "SKIP: $*"
  CLUSTER_SKIPPED=1
  exit 77
}

cluster_pass() {
  CLUSTER_PASSED=$((CLUSTER_PASSED + 1))
  cluster_log "ok - $* (at $(cluster_elapsed)s)"
}

cluster_fail() {
  CLUSTER_FAILED=$((CLUSTER_FAILED + 1))
  cluster_log "FAIL: $*"
  if [[ -n $CLUSTER_ON_FAIL ]]; then "$CLUSTER_ON_FAIL" >&2 || true; fi
  exit 1
}

# cluster_show FILE...: print files (bounded) into a failure message.
cluster_show() {
  local f
  for f in "$@"; do
    echo "----- $f (last 60 lines) -----"
    if [[ -f $f ]]; then tail -n 60 -- "$f"; else echo "(missing)"; fi
  done
  echo "-----"
}

# cluster_require PROGRAM PACKAGE: skip when PROGRAM is not installed.
cluster_require() {
  command -v "$1" >/dev/null 2>&1 ||
    cluster_skip "$1 not found; install the Debian package $2 (apt-get install $2)"
}

# cluster_resolve_ddpx [PATH]: DDPX from the first argument, else $DDPX, else <repo>/build/ddpx.
cluster_resolve_ddpx() {
  local repo
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  DDPX=${1:-${DDPX:-$repo/build/ddpx}}
  if [[ ! -x $DDPX || -d $DDPX ]]; then
    cluster_log "usage: $0 [PATH_TO_DDPX] (or DDPX=PATH); '$DDPX' is not an executable file"
    exit 2
  fi
  DDPX=$(cd "$(dirname "$DDPX")" && pwd)/$(basename "$DDPX")
  if [[ ! -x $(dirname "$DDPX")/ddpx-torch ]]; then
    cluster_log "note: no ddpx-torch beside $DDPX; 'ddpx train' will fail to start"
  fi
  export DDPX
}

# Remove the variables of launchers (torchrun, Slurm, Open MPI, PMIx) that the caller may
# be running under: ddpx reads them first, and srun/sbatch/mpirun take options from them.
cluster_clean_env() {
  local v
  unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT
  unset DDPX_STORE_FILE DDPX_RESTART_COUNT
  while read -r v; do
    unset "$v"
  done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|OMPI|PMIX|PMI)_' || true)
}

# cluster_free_port VAR: set VAR to a TCP port in 20000..31999 (below Linux's ephemeral
# range) that no socket on this machine uses now and that this test has not handed out.
cluster_free_port() {
  local _f _addr _port _i _used=" "
  for _f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $_f ]] || continue
    while read -r _ _addr _; do
      [[ $_addr == *:* ]] && _used+="$((16#${_addr##*:})) "
    done <"$_f"
  done
  for ((_i = 0; _i < 500; _i++)); do
    _port=$((20000 + RANDOM % 12000))
    if [[ $_used != *" $_port "* && " ${CLUSTER_PORTS_TAKEN:-} " != *" $_port "* ]]; then
      CLUSTER_PORTS_TAKEN="${CLUSTER_PORTS_TAKEN:-} $_port"
      printf -v "$1" '%s' "$_port"
      return 0
    fi
  done
  cluster_fail "no free TCP port found in 20000..31999"
}

# cluster_alive PID: the process exists and is not a zombie.
cluster_alive() {
  local state
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# cluster_pids_using DIR: processes other than this shell whose environment, working
# directory or open files mention DIR (the daemons, slurmstepd, srun, mpirun, the ranks).
cluster_pids_using() {
  local dir=$1 pid
  {
    grep -lsF -- "$dir" /proc/[0-9]*/environ || true
    find /proc/[0-9]*/cwd /proc/[0-9]*/fd -maxdepth 1 -lname "$dir*" 2>/dev/null || true
  } | sed -n 's|^/proc/\([0-9]*\)/.*|\1|p' | sort -un | while read -r pid; do
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    if cluster_alive "$pid"; then echo "$pid"; fi
  done
}

# cluster_stop_pids_using DIR: SIGTERM, then SIGKILL after 5 s, every process using DIR;
# prints the ones that had to be stopped.
cluster_stop_pids_using() {
  local dir=$1 pids i
  pids=$(cluster_pids_using "$dir")
  [[ -z $pids ]] && return 0
  cluster_log "stopping leftover processes using $dir: $(echo "$pids" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    pids=$(cluster_pids_using "$dir")
    [[ -z $pids ]] && return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

cluster_on_exit() {
  local rc=$? i
  trap - EXIT
  cd / || true
  for ((i = ${#CLUSTER_CLEANUPS[@]} - 1; i >= 0; i--)); do
    "${CLUSTER_CLEANUPS[i]}" || cluster_log "cleanup ${CLUSTER_CLEANUPS[i]} failed"
  done
  if [[ $rc != 0 && $rc != 77 && $CLUSTER_FAILED == 0 ]]; then
    CLUSTER_FAILED=1
    cluster_log "FAIL: stopped with exit status $rc (see the messages above)"
  fi
  [[ $rc == 77 ]] || cluster_log "finished in $(cluster_elapsed)s"
  echo "$CLUSTER_TEST_NAME: $CLUSTER_PASSED passed, $CLUSTER_FAILED failed, $CLUSTER_SKIPPED skipped"
  exit "$rc"
}
trap cluster_on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cluster_add_cleanup FUNCTION: run FUNCTION at exit (last added runs first).
cluster_add_cleanup() { CLUSTER_CLEANUPS+=("$1"); }

_cluster_tmpdir_cleanup() {
  [[ -n ${CLUSTER_DIR:-} && -d $CLUSTER_DIR ]] || return 0
  cluster_stop_pids_using "$CLUSTER_DIR"
  if [[ ${CLUSTER_KEEP:-0} == 1 ]]; then
    cluster_log "kept $CLUSTER_DIR (CLUSTER_KEEP=1)"
  else
    rm -rf -- "$CLUSTER_DIR"
  fi
}

# cluster_tmpdir: make a fresh CLUSTER_DIR (short: Unix socket paths live in it); at exit every
# process still using it is stopped and it is removed. Do not export paths inside it: the
# cleanup finds leftover processes by the path in their environment.
cluster_tmpdir() {
  local base=${TMPDIR:-/tmp}
  ((${#base} > 40)) && base=/tmp
  CLUSTER_DIR=$(mktemp -d "$base/ddpx-cluster.XXXXXX")
  chmod 755 "$CLUSTER_DIR"
  cluster_add_cleanup _cluster_tmpdir_cleanup
}

# ddpx_assert_trained FILE WORLD SOURCE HOST PORT [PREFIX]: FILE holds the output of one
# `ddpx train --num_epochs 1 --device cpu` job of WORLD ranks that found its world from
# SOURCE (slurm | mpi | torchrun) and met at HOST:PORT (an empty PORT: any port). PREFIX
# (an ERE) starts each of rank 0's lines, e.g. '0: ' for srun --label.
ddpx_assert_trained() {
  local file=$1 world=$2 source=$3 host=$4 port=${5:-'[0-9]+'} prefix=${6:-} pattern r n
  local patterns=(
    # no $: ddpx writes a stderr line and its newline in two write()s, and mpirun
    # --tag-output tags each write, so the line reads "...(gloo+shm, mpi)[1,0]<stderr>:".
    "^${prefix}joined ${world} ranks via ${host//./\\.}:${port} \(.*, ${source}\)"
    "^${prefix}world size ${world} "
  )
  for ((r = 0; r < world; r++)); do patterns+=("^${prefix}  rank ${r}: cpu$"); done
  patterns+=(
    "^${prefix}Epoch - 0/1: time - "
    "^${prefix}Accuracy on test dataset - [0-9]+\.[0-9]+$"
  )
  for pattern in "${patterns[@]}"; do
    grep -qE -- "$pattern" "$file" ||
      cluster_fail "no line matching /$pattern/ in the job's output:
$(cluster_show "$file")"
  done
  n=$(grep -c 'Accuracy on test dataset' "$file" || true)
  [[ $n == 1 ]] ||
    cluster_fail "expected one test-accuracy line (rank 0 only), found $n:
$(cluster_show "$file")"
}
