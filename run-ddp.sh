#!/usr/bin/env bash
# run-ddp.sh: the seed's launcher command line, kept for users' scripts. It translates the
# seed's positional forms into `ddpx run` (docs/launcher.md) and execs it. Its training runs
# default to the seed's workload: CIFAR-100 from ./data at the model's input size.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage:
  run-ddp.sh NPROC script_single_node "ARGS"
      -> ddpx run NPROC -- train [SEED_DEFAULTS] ARGS
  run-ddp.sh NPROC NNODES|auto MASTER_ADDR script_multi_node "ARGS"
      -> ddpx run NPROC --nnodes NNODES [--node_rank NODE_RANK]
                        --master_addr MASTER_ADDR --master_port MASTER_PORT
                        -- train [SEED_DEFAULTS] ARGS
  run-ddp.sh NPROC
      -> ddpx shell NPROC   (interactive: your shell with NPROC devices and a port reserved)
  run-ddp.sh --help

  NPROC        workers on this node
  NNODES|auto  number of nodes; auto = $SLURM_NNODES, else $NNODES, else as many as start
               the same command (at least 2; the job forms 10 s after the last one joins)
  MASTER_ADDR  address of node 0, reachable from every node
  ARGS         arguments for `ddpx train`, one quoted string (e.g. "--model resnet18 --num_epochs 2")
  SEED_DEFAULTS the seed's workload, each part only when ARGS do not choose it (nor --recipe):
               --dataset cifar100 (read from ./data: data/cifar-100-python/ or its .tar.gz;
               `ddpx data download cifar100 --data_dir data` fetches it)
               --image_size model (the model's input size: 224x224 for the ResNets)
  A script name other than script_single_node / script_multi_node is run as the program
  (found on PATH or by path) instead of `ddpx train`.

Environment:
  NODE_RANK    this node's rank (else $SLURM_NODEID, else assigned at rendezvous: the host of
               MASTER_ADDR is node 0, the others in the order they join)
  MASTER_PORT  rendezvous port on node 0 for multi-node jobs (default 29500)
  DDPX_BIN     the ddpx binary (else ./build/src/ddpx next to this script, else ddpx on PATH)
  DDPX_RUN_ARGS  extra `ddpx run` flags, e.g. "--tee all --log_dir /scratch/logs" or "--dry_run"
USAGE
}

die_usage() {
  echo "run-ddp.sh: $1" >&2
  echo "run-ddp.sh: see run-ddp.sh --help" >&2
  exit 2
}

is_count() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }

# has_flag FLAG WORDS...: is FLAG among the words, as `FLAG VALUE` or `FLAG=VALUE`?
has_flag() {
  local flag=$1 word
  shift
  for word in "$@"; do
    [[ "$word" == "$flag" || "$word" == "$flag="* ]] && return 0
  done
  return 1
}

# The seed's training defaults that ARGS leave open (see SEED_DEFAULTS in the usage).
seed_defaults() {
  has_flag --recipe "$@" && return 0  # a recipe names its own data
  has_flag --dataset "$@" || printf '%s\n' --dataset cifar100
  has_flag --image_size "$@" || printf '%s\n' --image_size model
}

find_ddpx() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [[ -n "${DDPX_BIN:-}" ]]; then
    [[ -x "$DDPX_BIN" ]] || die_usage "DDPX_BIN=$DDPX_BIN is not an executable file"
    echo "$DDPX_BIN"
  elif [[ -x "$here/build/src/ddpx" ]]; then
    echo "$here/build/src/ddpx"
  elif command -v ddpx >/dev/null 2>&1; then
    command -v ddpx
  else
    die_usage "no ddpx binary: build it (see README.md), put it on PATH, or set DDPX_BIN"
  fi
}

# The seed's script names mean "train with ddpx"; anything else is a program to run.
program_for() {
  case "$1" in
    script_single_node | script_single_node.py | script_multi_node | script_multi_node.py)
      echo train ;;
    *) echo "$1" ;;
  esac
}

if [[ $# -eq 0 || "$1" == "--help" || "$1" == "-h" ]]; then
  usage
  [[ $# -eq 0 ]] && exit 2
  exit 0
fi

nproc=$1
is_count "$nproc" || die_usage "NPROC '$nproc' must be a positive whole number"

if [[ $# -eq 1 ]]; then
  # The seed's interactive mode: a shell holding NPROC devices and a port (no SSH, no container).
  exec "$(find_ddpx)" shell "$nproc"
fi

ddpx=$(find_ddpx)
launcher_flags=()
if [[ "$2" == "auto" ]] || is_count "$2"; then
  [[ $# -ge 4 && $# -le 5 ]] ||
    die_usage "the multi-node form is NPROC NNODES|auto MASTER_ADDR SCRIPT \"ARGS\""
  nnodes=$2
  if [[ "$nnodes" == "auto" ]]; then nnodes=${SLURM_NNODES:-${NNODES:-auto}}; fi
  [[ "$nnodes" == "auto" ]] || is_count "$nnodes" ||
    die_usage "NNODES '$nnodes' must be a positive whole number or auto"
  node_rank=${NODE_RANK:-${SLURM_NODEID:-}}
  master_port=${MASTER_PORT:-29500}
  launcher_flags=(--nnodes "$nnodes")
  if [[ -n "$node_rank" ]]; then launcher_flags+=(--node_rank "$node_rank"); fi
  launcher_flags+=(--master_addr "$3" --master_port "$master_port")
  script=$4
  script_args=${5:-}
else
  [[ $# -le 3 ]] ||
    die_usage "the single-node form is NPROC SCRIPT \"ARGS\" (quote ARGS as one word)"
  script=$2
  script_args=${3:-}
fi

set -f  # ARGS is split on spaces like the seed did, without expanding * or ?
# shellcheck disable=SC2206
extra_args=(${script_args})
# shellcheck disable=SC2206
run_args=(${DDPX_RUN_ARGS:-})
set +f

program=$(program_for "$script")
defaults=()
if [[ "$program" == train ]]; then
  mapfile -t defaults < <(seed_defaults "${extra_args[@]}")
fi

exec "$ddpx" run "$nproc" "${launcher_flags[@]}" "${run_args[@]}" -- "$program" \
  "${defaults[@]}" "${extra_args[@]}"
