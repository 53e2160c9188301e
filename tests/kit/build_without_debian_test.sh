#!/usr/bin/env bash
# The GPU-check build (-DDDPX_GPU_CHECK=ON, bench/gpu_check.sh) on a machine that has the torch
# wheel, CUDA, CMake, ninja and a compiler but none of the Debian -dev packages scripts/bootstrap
# installs (tests/kit/without_debian_dev.sh hides them): scripts/gpu-kit makes the kit here, then,
# with the packages out of reach, CMake configures against the kit alone (each library named as
# coming from it) and builds a subset that touches every library the kit stands in for, one
# object each, without the precompiled torch header (its 75 s alone would be most of the test):
# the job service's stand-in and a launcher object (nlohmann-json), and the objects that include
# CLI11, Gloo's headers and zlib, and GoogleTest from the kit's sources (`ddpx` itself waits for
# ddpx-torch, the whole build: too long for CI on 2 cores). DDPX_KIT_TEST_FULL=1 builds everything the GPU check
# runs (ddpx, ddpx-torch, test_gpu: 140 steps) and checks that those binaries need none of the
# service's or the download's libraries and that `ddpx serve` and `ddpx submit` say they are not
# in that build.
# It builds file by file (-DDDPX_UNITY_BUILD=OFF): the subset names single objects.
# The build folder build-kit-test/ ($DDPX_KIT_TEST_BUILD) stays for the next run (ccache and ninja
# reuse it).
# Usage: tests/kit/build_without_debian_test.sh PYTHON   (the Python whose torch is built against)
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
python="${1:?usage: build_without_debian_test.sh PYTHON}"
build="${DDPX_KIT_TEST_BUILD:-$src/build-kit-test}"
kit="$build/kit"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

mkdir -p "$build"
"$src/scripts/gpu-kit" "$kit" >/dev/null

hide="$src/tests/kit/without_debian_dev.sh"
set +e
"$hide" true
rc=$?
set -e
((rc == 77)) && exit 77
((rc == 0)) || fail "hiding the Debian packages failed (exit $rc)"

export KEEP_ENV="CCACHE_DIR"
configure_log="$build/configure.log"
full="${DDPX_KIT_TEST_FULL:-0}"
pch=$([[ $full == 1 ]] && echo ON || echo OFF)
if ! "$hide" cmake -S "$src" -B "$build/b" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDDPX_GPU_CHECK=ON -DDDPX_KIT="$kit" -DDDPX_PYTHON="$python" -DDDPX_BUILD_TESTS=ON \
  -DDDPX_BUILD_EXAMPLES=OFF -DDDPX_UNITY_BUILD=OFF -DDDPX_USE_PCH="$pch" >"$configure_log" 2>&1; then
  cat "$configure_log"
  fail "configure with the Debian packages hidden"
fi
for lib in zlib.h nlohmann/json.hpp CLI/CLI.hpp gloo/algorithm.h GoogleTest; do
  grep -q "ddpx: $lib from the kit $kit" "$configure_log" ||
    fail "configure did not take $lib from the kit: $(grep '^-- ddpx' "$configure_log")"
done

if [[ $full == 1 ]]; then
  targets=(ddpx ddpx-torch test_gpu)
else
  targets=(gtest_main
           src/CMakeFiles/ddpx_serve.dir/absent/serve.cpp.o
           src/CMakeFiles/ddpx_launch.dir/launch/job_record.cpp.o
           src/CMakeFiles/ddpx_cli.dir/cli/jobs_command.cpp.o
           src/CMakeFiles/ddpx_distributed.dir/distributed/factories.cpp.o
           src/CMakeFiles/ddpx_io.dir/io/gzip.cpp.o)
fi
if ! "$hide" ninja -C "$build/b" -j "${DDPX_JOBS:-$(nproc)}" "${targets[@]}" >"$build/build.log" 2>&1; then
  tail -40 "$build/build.log"
  fail "build of ${targets[*]} with the Debian packages hidden"
fi

if [[ $full != 1 ]]; then
  echo "PASS: configured and built ${targets[*]} from the kit with the Debian -dev packages hidden"
  exit 0
fi
# The binaries need no library of the service or the download (libtorch, CUDA, glibc alone).
for bin in ddpx ddpx-torch; do
  needed=$(readelf -d "$build/b/src/$bin" | grep NEEDED || true)
  if grep -Eq 'libcurl|libarchive|libsqlite3|libssl|libcrypto|httplib|libz\.so' <<<"$needed"; then
    fail "$bin needs a library the GPU-check build leaves out: $needed"
  fi
done
# The commands left out say so, in one line, with a usage exit code.
for cmd in "serve --state $build/state" "submit --server http://127.0.0.1:1 -- train"; do
  set +e
  out=$("$hide" "$build/b/src/ddpx" $cmd 2>&1)
  rc=$?
  set -e
  ((rc == 2)) || fail "ddpx $cmd exited $rc, not 2: $out"
  [[ "$out" == *"is not in this build (configured with -DDDPX_GPU_CHECK=ON"* ]] ||
    fail "ddpx $cmd did not say it is left out: $out"
done
echo "PASS: configured and built ${targets[*]} from the kit with the Debian -dev packages hidden"
