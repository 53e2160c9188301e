#!/usr/bin/env bash
# ddpx as a job step smaller than its allocation (real Slurm, one node). A batch job's
# SLURM_NTASKS_PER_NODE is the allocation's request and srun passes it on to every step
# unchanged; the step's own layout is SLURM_STEP_TASKS_PER_NODE (= its SLURM_TASKS_PER_NODE).
#   1. #SBATCH --ntasks-per-node=2; srun -n1 ddpx train   -> trains alone (world size 1)
#   2. #SBATCH --ntasks-per-node=4; srun -n2 ddpx train   -> trains as world size 2
# Usage: slurm_step_layout_test.sh [PATH_TO_DDPX]   (or DDPX=...). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

CLUSTER_TEST_NAME=slurm_step_layout_test
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/slurm_cluster.sh
source "$here/slurm_cluster.sh"

slurm_cluster_setup "$@"

# run_step ALLOC_TASKS STEP_TASKS: a batch job of ALLOC_TASKS tasks per node whose one step
# runs `srun -n STEP_TASKS ddpx train`; the step must train as world size STEP_TASKS.
run_step() {
  local alloc=$1 step=$2 port script
  cluster_free_port port
  script=$work/step-$alloc-$step.sbatch
  cat >"$script" <<EOF
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=$alloc
#SBATCH --time=5
#SBATCH --output=$work/step-$alloc-$step-%j.out
export MASTER_PORT=$port
srun -n$step $(printf '%q ' "$DDPX" "${train[@]}")
EOF
  slurm_cluster_sbatch "$script" 60 ||
    cluster_fail "--ntasks-per-node=$alloc, srun -n$step: job ended $SLURM_CLUSTER_JOB_STATE (exit code $SLURM_CLUSTER_JOB_EXIT):
$(cluster_show "$SLURM_CLUSTER_JOB_STDOUT")"
  if ((step > 1)); then
    ddpx_assert_trained "$SLURM_CLUSTER_JOB_STDOUT" "$step" slurm "$SLURM_CLUSTER_NODE" "$port"
  else
    if ! grep -qE '^world size 1 ' "$SLURM_CLUSTER_JOB_STDOUT" ||
      ! grep -qE '^Accuracy on test dataset - [0-9.]+$' "$SLURM_CLUSTER_JOB_STDOUT"; then
      cluster_fail "--ntasks-per-node=$alloc, srun -n1: no world-size-1 training in the output:
$(cluster_show "$SLURM_CLUSTER_JOB_STDOUT")"
    fi
  fi
  cluster_pass "#SBATCH --ntasks-per-node=$alloc; srun -n$step ddpx train: trained as world size $step"
}

run_step 2 1
run_step 4 2
