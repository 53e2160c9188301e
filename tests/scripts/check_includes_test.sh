#!/usr/bin/env bash
# scripts/check-includes catches each kind of breach of the include rule, naming the file, the
# line and the edge: an upward include, bench reaching into train's parts, torch in a torch-free
# folder, a library linking a folder above it, a folder missing from the rule, and the same rule
# between the subfolders of distributed/ and parallel/ (SUBGRAPH), and a transport's private
# subfolder reached from outside distributed/ (PRIVATE). Each case runs on a fresh copy of src/.
# Usage: tests/scripts/check_includes_test.sh PYTHON
set -euo pipefail
python="${1:-python3}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

fresh() {
  rm -rf "$work/tree"
  mkdir -p "$work/tree/scripts"
  cp -r "$root/src" "$work/tree/src"
  cp "$root/scripts/check-includes" "$work/tree/scripts/"
}

# expect NAME RC PATTERN: the check exits with RC and prints a line matching PATTERN.
expect() {
  local name="$1" want_rc="$2" pattern="$3" rc=0
  "$python" "$work/tree/scripts/check-includes" --root "$work/tree" >"$work/out" 2>&1 || rc=$?
  if [[ $rc -ne $want_rc ]] || ! grep -Eq -- "$pattern" "$work/out"; then
    echo "FAIL $name: want exit $want_rc and a line matching: $pattern; got exit $rc:"
    sed 's/^/    /' "$work/out"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep -E -m1 -- "$pattern" "$work/out")"
  fi
}

# append FILE LINE: adds LINE at the end of src/FILE and prints its line number.
append() { echo "$2" >>"$work/tree/src/$1"; wc -l <"$work/tree/src/$1"; }

fresh
expect "the tree as it is" 0 "follow the one-way rule"

fresh
n=$(append core/error.h '#include "train/trainer.h"')
expect "upward include" 1 "^src/core/error.h:$n: core -> train is an upward or sideways include"

fresh
n=$(append models/mlp.h '#include "data/loader.h"')
expect "sideways include" 1 "^src/models/mlp.h:$n: models -> data is an upward or sideways"

fresh
n=$(append bench/gemm.cpp '#include "train/metrics.h"')
expect "bench into train's parts" 1 "^src/bench/gemm.cpp:$n: bench -> train only through .*not \"train/metrics.h\""

fresh
n=$(append trace/collective_trace.h '#include <torch/types.h>')
expect "torch in a torch-free folder" 1 "^src/trace/collective_trace.h:$n: trace/ is torch-free"

fresh
sed -i 's/^ddpx_folder_library(ddpx_trace trace TORCH_FREE ddpx_core)/ddpx_folder_library(ddpx_trace trace TORCH_FREE ddpx_core ddpx_launch)/' \
  "$work/tree/src/CMakeLists.txt"
expect "a link upward" 1 "^src/CMakeLists.txt: ddpx_trace links ddpx_launch"

fresh
sed -i 's/^ddpx_folder_library(ddpx_optim optim ddpx_core ${DDPX_TORCH})/ddpx_folder_library(ddpx_optim optim ${DDPX_TORCH})/' \
  "$work/tree/src/CMakeLists.txt"
expect "an include without its link" 1 "^src/optim/.*: optim includes core/ but ddpx_optim does not link ddpx_core"

fresh
mkdir "$work/tree/src/newthing" && echo '#pragma once' >"$work/tree/src/newthing/a.h"
expect "a folder outside the rule" 1 "^src/newthing/: a folder missing"

fresh
n=$(append distributed/c10d/traced_backend.cpp '#include "distributed/collectives.h"')
expect "a subfolder upward" 1 "^src/distributed/c10d/traced_backend.cpp:$n: distributed/c10d -> distributed is an upward"

fresh
n=$(append distributed/shm/shm_arena.h '#include "distributed/c10d/forwarding_backend.h"')
expect "the two transports' folders sideways" 1 "^src/distributed/shm/shm_arena.h:$n: distributed/shm -> distributed/c10d is an upward or sideways"

fresh
n=$(append distributed/c10d/forwarding_backend.h '#include "distributed/shm/shm_arena.h"')
expect "the other way too" 1 "^src/distributed/c10d/forwarding_backend.h:$n: distributed/c10d -> distributed/shm is an upward or sideways"

fresh
n=$(append parallel/sharded/shard_unit.cpp '#include "distributed/shm/shm_allreduce.h"')
expect "a strategy naming the transport" 1 "^src/parallel/sharded/shard_unit.cpp:$n: parallel -> distributed/shm reaches into a private part of distributed"

fresh
n=$(append parallel/data/sharded_sgd.cpp '#include "distributed/shm_backend.h"')
expect "a strategy naming the transport's backend" 1 "^src/parallel/data/sharded_sgd.cpp:$n: parallel -> distributed/shm_backend.h reaches into a private part of distributed"

fresh
n=$(append parallel/sharded/shard_unit.h '#include "parallel/pipeline/pipeline_plan.h"')
expect "a subfolder sideways" 1 "^src/parallel/sharded/shard_unit.h:$n: parallel/sharded -> parallel/pipeline is an upward"

fresh
mkdir "$work/tree/src/parallel/context" && echo '#pragma once' >"$work/tree/src/parallel/context/a.h"
expect "a subfolder outside the rule" 1 "^src/parallel/context/: a subfolder missing"

exit $((failures > 0))
