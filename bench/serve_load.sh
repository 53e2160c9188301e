#!/usr/bin/env bash
# The job service under load: status requests (GET /api/v1/jobs/ID) per second and latency
# percentiles with 100 concurrent clients (wrk, Debian's package), while the service runs 2
# jobs of its own. Usage: bench/serve_load.sh [DDPX] [SECONDS]   (defaults: build/src/ddpx, 10)
set -euo pipefail
ddpx=$(realpath "${1:-build/src/ddpx}")
seconds=${2:-10}
command -v wrk >/dev/null || { echo "serve_load: needs wrk (apt-get install wrk)" >&2; exit 77; }
state=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { [[ -n "${serve:-}" ]] && kill "$serve" 2>/dev/null; wait 2>/dev/null; rm -rf "$state"; }
trap cleanup EXIT
token=$("$ddpx" serve token add bench --state "$state/s" 2>/dev/null || "$ddpx" serve --state "$state/s" token add bench)
"$ddpx" serve --state "$state/s" --listen "127.0.0.1:$port" --slots 2 2>"$state/serve.log" &
serve=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/api/v1/health" >/dev/null && break; sleep 0.1; done
submit() {
  curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "{\"command\": [\"sleep\", \"$((seconds + 30))\"]}" "http://127.0.0.1:$port/api/v1/jobs" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
id=$(submit); submit >/dev/null
echo "# ddpx serve under load: $(date -u +%FT%TZ), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
echo "# GET /api/v1/jobs/$id, 100 connections, 2 wrk threads, ${seconds} s, 2 jobs running"
wrk -t2 -c100 -d"${seconds}s" --latency -H "Authorization: Bearer $token" \
  "http://127.0.0.1:$port/api/v1/jobs/$id" | sed -n '/Latency Distribution/,/Transfer/p;/Non-2xx/p'
