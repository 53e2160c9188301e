#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time on its seeds, at the lowest CPU priority, and
# prints the numbers docs/reliability.md records (executions, coverage, corpus, peak RSS).
#   Usage: fuzz/run.sh TARGET [seconds=600]     (BUILD=build-fuzz; WORK=/tmp/ddpx-fuzz)
# The grown corpus is kept in $WORK/TARGET; crashes, leaks, timeouts and OOMs are written to
# $WORK/TARGET-artifacts/ and make this script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
target="$1"
seconds="${2:-600}"
build="${BUILD:-build-fuzz}"
work="${WORK:-/tmp/ddpx-fuzz}"
mkdir -p "$work/$target" "$work/$target-artifacts"
seeds="fuzz/corpus/$target"
log="$work/$target.log"
status=0
nice -n 19 "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
  -print_final_stats=1 -artifact_prefix="$work/$target-artifacts/" "$work/$target" "$seeds" \
  >"$log" 2>&1 || status=$?
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
echo "$target: exit $status; last status: $last"
grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$log" || true
grep -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' "$log" | head -5 || true
exit "$status"
