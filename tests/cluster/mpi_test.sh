#!/usr/bin/env bash
# ddpx under Open MPI's mpirun (Debian's openmpi-bin; ddpx does not call MPI itself, it reads
# OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE and meets at MASTER_ADDR, default 127.0.0.1):
#   1. mpirun -np 2 ddpx train trains as one job of world size 2; rank 0 reports accuracy.
#   2. a bad OMPI_COMM_WORLD_LOCAL_RANK fails fast with an error naming it; mpirun exits non-zero.
#   3. mpirun -np 2 ddpx train --pipeline_parallel 2: two stages of one pipeline; rank 0 prints
#      the stage table, the bubble and the accuracy.
# Usage: mpi_test.sh [PATH_TO_DDPX]   (or DDPX=...). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

CLUSTER_TEST_NAME=mpi_test
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"

cluster_require mpirun openmpi-bin
cluster_resolve_ddpx "$@"
cluster_clean_env
cluster_tmpdir
cd "$CLUSTER_DIR"

# Root is refused unless allowed (the variables work for every Open MPI 4 and 5 tool);
# --oversubscribe: 2 ranks on a machine that may have fewer cores; no MPI transport is
# used, so no btl/vader settings are needed. CLUSTER_TAG marks the processes for the cleanup.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(timeout 60 env "CLUSTER_TAG=$CLUSTER_DIR" mpirun --oversubscribe --tag-output -np 2)
train=(train --dataset synthetic --model mlp --num_epochs 1 --batch_size 64 --synthetic_size 512
  --threads 1 --device cpu --timeout 30)

# --- 1. mpirun -np 2 -----------------------------------------------------------------------
cluster_free_port port
rc=0
"${mpirun[@]}" -x "MASTER_PORT=$port" "$DDPX" "${train[@]}" >mpi.out 2>mpi.err || rc=$?
cat mpi.out mpi.err >mpi.all
[[ $rc == 0 ]] || cluster_fail "mpirun -np 2 ddpx train exited $rc:
$(cluster_show mpi.all)"
ddpx_assert_trained mpi.all 2 mpi 127.0.0.1 "$port" '\[1,0\]<std(out|err)>:'
if grep -q '^\[1,1\]<stdout>:' mpi.all; then
  cluster_fail "rank 1 printed to stdout (only rank 0 should): $(cluster_show mpi.all)"
fi
cluster_pass "mpirun -np 2: one job of world size 2 (mpi) via 127.0.0.1:$port, rank 0 reported the test accuracy"

# --- 2. a bad OMPI_COMM_WORLD_LOCAL_RANK ---------------------------------------------------
cluster_free_port port
rc=0
t0=$(date +%s%N)
"${mpirun[@]}" -x "MASTER_PORT=$port" env OMPI_COMM_WORLD_LOCAL_RANK=7 "$DDPX" "${train[@]}" \
  >bad.out 2>bad.err || rc=$?
took=$(cluster_elapsed "$t0")
[[ $rc != 0 && $rc != 124 ]] || cluster_fail "a bad OMPI_COMM_WORLD_LOCAL_RANK: mpirun exited $rc, expected a failure:
$(cluster_show bad.out bad.err)"
grep -qE '^\[1,[01]\]<stderr>:ddpx: error: OMPI_COMM_WORLD_LOCAL_RANK=7 is outside \[0, local world size 2\)' bad.err ||
  cluster_fail "no error naming OMPI_COMM_WORLD_LOCAL_RANK: $(cluster_show bad.out bad.err)"
if grep -q '^\[1,[01]\]<stdout>:' bad.out; then
  cluster_fail "a rank printed training output despite the bad rank: $(cluster_show bad.out)"
fi
((${took%.*} < 10)) || cluster_fail "a bad OMPI_COMM_WORLD_LOCAL_RANK took ${took}s to fail (expected < 10 s)"
cluster_pass "a bad OMPI_COMM_WORLD_LOCAL_RANK fails in ${took}s (mpirun exit $rc) with an error naming it"

# --- 3. mpirun -np 2 with two pipeline stages ------------------------------------------------
cluster_free_port port
rc=0
"${mpirun[@]}" -x "MASTER_PORT=$port" "$DDPX" "${train[@]}" --pipeline_parallel 2 \
  --microbatches 4 >pipe.out 2>pipe.err || rc=$?
cat pipe.out pipe.err >pipe.all
[[ $rc == 0 ]] || cluster_fail "mpirun -np 2 ddpx train --pipeline_parallel 2 exited $rc:
$(cluster_show pipe.all)"
ddpx_assert_trained pipe.all 2 mpi 127.0.0.1 "$port" '\[1,0\]<std(out|err)>:'
for pattern in 'pipeline: 2 stages on 2 ranks a replica, 1 replica' \
  'plan: pipeline parallel: 2 stages x 1 data-parallel replica' 'pipeline bubble .* by rank: 0 '; do
  grep -qE "^\[1,0\]<std(out|err)>:.*$pattern" pipe.all ||
    cluster_fail "no line matching /$pattern/ from rank 0: $(cluster_show pipe.all)"
done
cluster_pass "mpirun -np 2 --pipeline_parallel 2: one pipeline of 2 stages (mpi), rank 0 reported the stage table, the bubble and the test accuracy"
