# Sourced by the bench scripts (bench/compare_*.sh and their kin) after `set -euo pipefail`:
# the checkout's root as the working folder, the ddpx under test ($DDPX_BIN, else
# $BUILD/src/ddpx, BUILD=build) and the Python beside it ($DDPX_PYTHON, else scripts/python-env
# --tests), a temporary folder $out removed at exit, a free loopback port, and the machine line
# every bench's output opens with.
cd "$(dirname "$0")/.."
ddpx="${DDPX_BIN:-${BUILD:-build}/src/ddpx}"
py="${DDPX_PYTHON:-$(scripts/python-env --tests)}"
bench_tmp=$(mktemp -d)
trap 'rm -rf "$bench_tmp"' EXIT
out="$bench_tmp"

# A TCP port free on 127.0.0.1 now, for a peer's MASTER_PORT.
free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# "# DATE on N cores: CPU; commit C[; EXTRA]": when, where and what a figure was measured on.
machine_line() {
  local line
  line="# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo |
    cut -d: -f2 | xargs); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "$line${1:+; $1}"
}
