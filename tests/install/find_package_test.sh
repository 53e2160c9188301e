#!/usr/bin/env bash
# ddpx as a C++ user meets it: `cmake --install` of this build into a fresh prefix, then
# examples/ configured as a project of its own with find_package(ddpx) against that prefix only
# (no source tree on its include path) and its DDP example built (the one this test runs: each
# example is a minute of compiling on 2 cores; the in-tree build compiles all three), then trained as
# two workers by the installed `ddpx run`. Checks the installed layout, that the installed
# commands run (`ddpx doctor`, through ddpx-torch), that both ranks end with the same weights,
# and that the loss falls.
# Usage: tests/install/find_package_test.sh BUILD_DIR
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:?usage: find_package_test.sh BUILD_DIR}"
work=$(mktemp -d /tmp/ddpx-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
for f in bin/ddpx bin/ddpx-torch lib/libddpx_parallel.a lib/cmake/ddpx/ddpxConfig.cmake \
  include/ddpx/parallel/data/ddp.h include/ddpx/distributed/context.h include/ddpx/core/error.h; do
  [[ -e "$work/prefix/$f" ]] || fail "the install lacks $f"
done

# The installed commands run: ddpx-torch finds its libtorch (its install RPATH), and where the
# build made the GPU library the doctor loads the installed one.
doctor=$(cd "$work" && "$work/prefix/bin/ddpx" doctor 2>&1) || fail "the installed ddpx doctor failed: $doctor"
if [[ -e "$build/src/libddpx-gpu.so" ]]; then
  [[ -e "$work/prefix/lib/libddpx-gpu.so" ]] || fail "the install lacks lib/libddpx-gpu.so"
  grep -q "library *loaded from $work/prefix/lib/libddpx-gpu.so" <<<"$doctor" ||
    fail "the installed ddpx did not load its own GPU library: $doctor"
fi

# The example's sources copied out, so that nothing can reach back into the checkout.
cp -r "$src/examples" "$work/examples"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$work/examples" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  "${launcher[@]}" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configuring examples/ against the install failed"; }
grep -q "$src/src" "$work/build/build.ninja" && fail "the example's build reaches into $src/src"
ninja -C "$work/build" -j "${DDPX_JOBS:-2}" example_my_model_ddp >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "building examples/ against the install failed"; }

out=$(cd "$work" && DDPX_JOBS_DIR="$work/jobs" "$work/prefix/bin/ddpx" run 2 --log_dir "$work/log" \
  -- "$work/build/example_my_model_ddp" 2>&1) || fail "ddpx run 2 of the example failed: $out"
logs=$(cat "$work"/log/*/rank*.log)
sums=$(grep -oE 'rank [01] weights checksum \S+' <<<"$logs" | sort -u)
[[ $(wc -l <<<"$sums") -eq 2 ]] || fail "expected both ranks' checksums, got: $logs"
[[ $(awk '{print $5}' <<<"$sums" | sort -u | wc -l) -eq 1 ]] || fail "ranks diverged: $sums"
first=$(grep -oE 'epoch 1 loss \S+' <<<"$out$logs" | head -1 | awk '{print $4}')
last=$(grep -oE 'epoch 5 loss \S+' <<<"$out$logs" | head -1 | awk '{print $4}')
[[ -n "$first" && -n "$last" ]] || fail "no epoch losses printed: $out"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 4) }' ||
  fail "the loss did not fall: epoch 1 $first, epoch 5 $last"
echo "PASS: installed ddpx built examples/ outside the tree; 2 ranks, loss $first -> $last, $sums"
