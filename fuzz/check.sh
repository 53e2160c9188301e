#!/usr/bin/env bash
# CI's fuzz stage (scripts/test runs it last): builds every libFuzzer target (fuzz/fuzz_*.cpp)
# with clang in build-fuzz, replays each target's seeds (fuzz/corpus/) and every input that once
# found a bug (fuzz/regressions/) once each, then fuzzes each target from its seeds for a fixed
# time, as many at a time as there are cores. Any crash, sanitizer report, leak, timeout or
# out-of-memory fails the stage and names the input that caused it.
#   Usage: fuzz/check.sh [seconds per target=60 [TARGET...]]   (0: build and replay only;
#          the targets default to every fuzz/fuzz_*.cpp, e.g. `fuzz/check.sh 60 pickle idx`)
# $DDPX_PYTHON names the torch to build against (scripts/test sets it); $DDPX_JOBS the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift $(($# > 0 ? 1 : 0))
jobs="${DDPX_JOBS:-$(nproc)}"
build=build-fuzz
start=$(date +%s)
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in fuzz/fuzz_*.cpp; do
    t=$(basename "$f" .cpp)
    targets+=("${t#fuzz_}")
  done
fi

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  ${DDPX_PYTHON:+-DDDPX_PYTHON="$DDPX_PYTHON"} -DDDPX_BUILD_FUZZERS=ON -DDDPX_SANITIZE=ON \
  -DDDPX_BUILD_TESTS=OFF -DDDPX_BUILD_EXAMPLES=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }
ninja -C "$build" -j "$jobs" "${targets[@]/#/fuzz_}"
built=$(date +%s)

# The image decoders' seeds are crops of real photographs encoded by cjpeg and PIL at this point
# (fuzz/make_image_seeds.py), into $build/seeds/TARGET, beside fuzz/corpus/TARGET.
python="${DDPX_PYTHON:-$(scripts/python-env 2>/dev/null)}"
rm -rf "$build/seeds"
"$python" fuzz/make_image_seeds.py "$build/seeds"

# Replay: one process per target (loading libtorch under ASan takes seconds), every file once,
# as many targets at a time as there are cores; the verdicts are printed in target order.
# Checkpoint findings are bare payloads: DDPX_FUZZ_FRAME=1 puts them behind a valid header and
# CRC-32 so that they reach the readers they once broke.
source cmake/sanitizer.env
replay() {  # replay TARGET: writes $build/replay-TARGET.{log,verdict}; fails on a finding
  local t="$1" dir input log="$build/replay-$1.log" frame=() inputs=()
  for dir in "fuzz/corpus/$t" "$build/seeds/$t" "fuzz/regressions/$t"; do
    [ -d "$dir" ] && inputs+=("$dir"/*)
  done
  [ "$t" = checkpoint ] && frame=(DDPX_FUZZ_FRAME=1)
  if env "${frame[@]}" "$build/fuzz/fuzz_$t" -timeout=20 -rss_limit_mb=2048 "${inputs[@]}" \
    >"$log" 2>&1; then
    echo "fuzz replay $t: ${#inputs[@]} inputs, no finding" >"$build/replay-$t.verdict"
  else
    {
      grep -E -A 30 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" |
        head -50 || true
      input=$(sed -n 's/^Running: //p' "$log" | tail -n 1)
      echo "fuzz replay $t: FAILED on ${input:-?} (log: $log; reproduce:" \
        "source cmake/sanitizer.env; ${frame[*]} $build/fuzz/fuzz_$t $input)"
    } >"$build/replay-$t.verdict"
    return 1
  fi
}
export -f replay
export build
failed=0
rm -f "$build"/replay-*.verdict
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'replay "$1"' _ {} || failed=1
for t in "${targets[@]}"; do
  if ! grep -qs "^fuzz replay $t: [0-9]* inputs, no finding" "$build/replay-$t.verdict"; then
    cat "$build/replay-$t.verdict" >&2 2>/dev/null || echo "fuzz replay $t: did not run" >&2
    failed=1
  else
    cat "$build/replay-$t.verdict"
  fi
done
replayed=$(date +%s)

# Fuzzing from the seeds only (a fresh work folder), so that every CI run starts alike.
if [ "$seconds" -gt 0 ]; then
  export BUILD="$build" WORK="$build/fuzz-runs"
  rm -rf "$WORK"
  printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} fuzz/run.sh {} "$seconds" || failed=1
fi
echo "fuzz stage: build $((built - start)) s, replay $((replayed - built)) s," \
  "fuzzing $(($(date +%s) - replayed)) s (${#targets[@]} targets, ${seconds} s each, $jobs at a time)"
exit "$failed"
