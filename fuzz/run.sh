#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time on its seeds, at the lowest CPU priority, and
# prints the numbers docs/reliability.md records (executions, coverage, corpus, peak RSS).
#   Usage: fuzz/run.sh TARGET [seconds=600]     (BUILD=build-fuzz; WORK=/tmp/ddpx-fuzz)
# The grown corpus is kept in $WORK/TARGET; crashes, leaks, timeouts and OOMs are written to
# $WORK/TARGET-artifacts/ and make this script exit non-zero, naming the input that found it.
# The sanitizer settings are cmake/sanitizer.env's, so a UBSan report is a finding too (by
# default UBSan prints and carries on, and libFuzzer would not notice it).
set -euo pipefail
cd "$(dirname "$0")/.."
target="$1"
seconds="${2:-600}"
build="${BUILD:-build-fuzz}"
work="${WORK:-/tmp/ddpx-fuzz}"
source cmake/sanitizer.env
mkdir -p "$work/$target" "$work/$target-artifacts"
# The committed seeds and those made at fuzz time (check.sh: $build/seeds), where they exist.
seeds=()
for dir in "fuzz/corpus/$target" "$build/seeds/$target"; do
  [ -d "$dir" ] && seeds+=("$dir")
done
log="$work/$target.log"
status=0
nice -n 19 "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
  -print_final_stats=1 -artifact_prefix="$work/$target-artifacts/" "$work/$target" "${seeds[@]}" \
  >"$log" 2>&1 || status=$?
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
echo "$target: exit $status; last status: $last"
grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$log" || true
if [ "$status" -ne 0 ]; then
  # The report itself (sanitizer stack, libFuzzer's reason), then the input that caused it.
  grep -E -A 30 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | head -50 || true
  input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  echo "$target: FINDING after ${seconds}s budget; input: ${input:-none written, see $log}" >&2
  echo "$target: reproduce with: source cmake/sanitizer.env; $build/fuzz/fuzz_$target ${input:-}" >&2
  echo "$target: full log: $log" >&2
fi
exit "$status"
