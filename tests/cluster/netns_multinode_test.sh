#!/usr/bin/env bash
# ddpx across real (virtual) hosts: three network namespaces ddpx-test-<id>-h1..h3, each with
# a veth `ddpx0` (10.231.X.N/24) into a bridge in a fourth namespace, `lo` up in each. Every
# "node" is a `ddpx run 1 --nnodes K --node_rank R` inside its namespace, so ranks meet only over
# the veths: the TCPStore on node 0's address, Gloo pairs between the hosts' addresses.
#
#   1. two nodes train (--transport gloo: the namespaces share one kernel, so the default
#      `auto` would all-reduce through shared memory): both exit 0, node 0 prints the accuracy,
#      world size 2; while it runs, `ss` shows (a) where the TCPStore listens and (b) that Gloo
#      binds GLOO_SOCKET_IFNAME's address.
#   2. (b) GLOO_SOCKET_IFNAME bogus on both nodes / on node 1 only / a list / unset.
#   3. (c) node 1's worker SIGKILLed mid-training: how fast node 0 ends, what it names.
#   4. (d) --master_addr that does not resolve / is not node 0's / nobody's: message, time.
#   5. run-ddp.sh's multi-node form (the seed's command line) across three namespaces; then
#      the identical command on every node (no NODE_RANK, no NNODES): ranks and the node count
#      are settled at rendezvous, the host of MASTER_ADDR is node 0.
#   6. (c) node 1's host drops off the network (link down, then its worker killed: no RST).
#   After every step no process is left in any namespace.
#
# What must hold (exit 1 otherwise): the trainings of 1 and 5 succeed with the right world
# size, every failure case fails (non-zero) within its bound, nothing is left behind. What is
# reported (lines `FINDING`): the behaviours in (a)-(d) that a user would call a bug; with
# DDPX_NETNS_STRICT=1 any such finding fails the test too.
#
# Usage: netns_multinode_test.sh [PATH_TO_DDPX]   (or DDPX=...). Needs root (ip netns).
# Exit 0 pass, 1 fail, 77 skip. Takes about 50-70 s. KEEP=1 keeps the work folder.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

DDPX=${1:-${DDPX:-$repo/build/src/ddpx}}
STRICT=${DDPX_NETNS_STRICT:-0}

skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }

[[ -x "$DDPX" ]] || die "no ddpx binary at '$DDPX' (pass it as the first argument or DDPX=)"
[[ -x "$(dirname "$DDPX")/ddpx-torch" ]] || die "ddpx-torch must sit beside $DDPX"
DDPX=$(cd "$(dirname "$DDPX")" && pwd)/$(basename "$DDPX")
command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"
command -v ss >/dev/null 2>&1 || skip "ss (iproute2) is not installed"
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"

# The environment a user might have set must not leak into the cases.
unset GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME MASTER_ADDR MASTER_PORT WORLD_SIZE RANK LOCAL_RANK \
  NNODES NODE_RANK SLURM_NNODES SLURM_NODEID DDPX_RUN_ARGS DDPX_STORE_FILE

id=$(printf '%04x%04x' "$RANDOM" "$RANDOM")
prefix=ddpx-test-$id
net=10.231.$((RANDOM % 200 + 20))
hosts=("$prefix-h1" "$prefix-h2" "$prefix-h3")
bridge_ns=$prefix-br
created=()
work=$(mktemp -d "${TMPDIR:-/tmp}/ddpx-netns.XXXXXX")
findings=()
t_start=${EPOCHREALTIME//[.,]/}

# Everything inside our namespaces is ours: kill it, then delete the namespaces (which takes
# the veths with them), then the work folder.
cleanup() {
  local rc=$? ns pid
  trap - EXIT INT TERM HUP
  exec 2>/dev/null  # bash's "Killed" notices for the jobs stopped below
  for ns in "${created[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for pid in $(jobs -p); do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ns in "${created[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if [[ "${KEEP:-0}" == 1 ]]; then say "work folder kept: $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
secs() { printf '%d.%01d' $(($1 / 1000)) $(($1 % 1000 / 100)); }

# ---- the hosts -------------------------------------------------------------------------------
if ! err=$(ip netns add "$bridge_ns" 2>&1); then
  skip "cannot create a network namespace (ip netns add: ${err//$'\n'/ })"
fi
created+=("$bridge_ns")
ip -n "$bridge_ns" link add br0 type bridge
ip -n "$bridge_ns" link set br0 up
for i in 1 2 3; do
  ns=${hosts[i - 1]}
  ip netns add "$ns"
  created+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "$ns" link add ddpx0 type veth peer name "h${i}p" netns "$bridge_ns"
  ip -n "$bridge_ns" link set "h${i}p" master br0
  ip -n "$bridge_ns" link set "h${i}p" up
  ip -n "$ns" addr add "$net.$i/24" dev ddpx0
  ip -n "$ns" link set ddpx0 up
done
H1=${hosts[0]} H2=${hosts[1]} H3=${hosts[2]}
MASTER=$net.1
# Node 0 has a second address (think: its public NIC), on lo; node 3 routes to it over the veth.
other=10.232.${net##*.}.1
ip -n "$H1" addr add "$other/32" dev lo
ip -n "$H3" route add "$other/32" via "$MASTER"
say "hosts: $H1 ($net.1) $H2 ($net.2) $H3 ($net.3), bridge in $bridge_ns; work in $work"

# ---- helpers ---------------------------------------------------------------------------------
# node NS RANK NNODES MASTER_ADDR PORT TAG IFNAME [train args]: start one node's launcher in the
# background (IFNAME "-" leaves GLOO_SOCKET_IFNAME unset); its console goes to TAG.out, its pid
# to PID[TAG].
declare -A PID=()
node() {
  local ns=$1 rank=$2 nnodes=$3 addr=$4 port=$5 tag=$6 ifname=$7
  shift 7
  local -a env_args=(-u GLOO_SOCKET_IFNAME)
  [[ "$ifname" != - ]] && env_args=("GLOO_SOCKET_IFNAME=$ifname")
  env "${env_args[@]}" ip netns exec "$ns" "$DDPX" run 1 --nnodes "$nnodes" --node_rank "$rank" \
    --master_addr "$addr" --master_port "$port" --log_dir "$work/$tag.logs" --grace_s 1 \
    -- train "$@" >"$work/$tag.out" 2>&1 &
  PID[$tag]=$!
}

running() {  # a child that is neither reaped nor a zombie
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ "$state" != Z ]]
}

# wait_exit PID LIMIT_MS: RC = its exit status, or "running" at the limit (left running).
wait_exit() {
  local pid=$1 limit=$2 start
  start=$(now_ms)
  while running "$pid"; do
    if (($(now_ms) - start >= limit)); then RC=running; return 0; fi
    sleep 0.05
  done
  RC=0
  wait "$pid" || RC=$?
}

# wait_all LIMIT_MS TAG...: wait for the launchers PID[TAG] together; code[TAG] = exit status
# (or "running": stopped by us at the limit), took[TAG] = ms from T0 to its own exit.
declare -A code=() took=()
wait_all() {
  local limit=$1 tag left
  shift
  left=("$@")
  while ((${#left[@]} > 0)); do
    local still=()
    for tag in "${left[@]}"; do
      if running "${PID[$tag]}"; then
        still+=("$tag")
      else
        took[$tag]=$(($(now_ms) - T0))
        code[$tag]=0
        wait "${PID[$tag]}" || code[$tag]=$?
      fi
    done
    left=("${still[@]}")
    ((${#left[@]} == 0)) && break
    if (($(now_ms) - T0 >= limit)); then
      for tag in "${left[@]}"; do
        code[$tag]=running took[$tag]=$(($(now_ms) - T0))
        stop "${PID[$tag]}"
      done
      break
    fi
    sleep 0.05
  done
}

# stop PID: SIGTERM to a launcher we gave up waiting for, then reap it.
stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait_exit "$1" 5000
  if [[ "$RC" == running ]]; then kill -KILL "$1" 2>/dev/null || true; wait "$1" || true; fi
}

# No process may be left in any host namespace once its launchers are gone.
assert_no_leftovers() {
  local what=$1 ns pid remaining="" deadline
  deadline=$(($(now_ms) + 3000))
  while :; do
    remaining=$(for ns in "${hosts[@]}"; do ip netns pids "$ns"; done | tr '\n' ' ')
    [[ -z "${remaining// /}" ]] && return 0
    (($(now_ms) > deadline)) && break
    sleep 0.1
  done
  for ns in "${hosts[@]}"; do
    for pid in $(ip netns pids "$ns"); do say "  left in $ns: $(tr '\0' ' ' <"/proc/$pid/cmdline")"; done
  done
  die "$what: processes left behind in the namespaces: $remaining"
}

# The lines a user reads first: ddpx's own error and launcher lines, not the tail echo.
errors() { grep -E '^(ddpx: error|ddpx run: (rank|no rank|collectives|got))' "$1" | cut -c1-400 | head -n "${2:-4}" || true; }
show() { sed 's/^/    /'; }

finding() {
  findings+=("$*")
  say "  FINDING: $*"
}

port() { echo $((20000 + RANDOM % 10000)); }

# ---- 1. two nodes train; (a) and (b) from ss while they run ----------------------------------
say "== 1. two nodes, GLOO_SOCKET_IFNAME=ddpx0, --transport gloo"
P=$(port)
train_long=(--dataset synthetic --model mlp --batch_size 64 --synthetic_size 512 --num_epochs 12
  --transport gloo --log_every 1000 --timeout 30)
t0=$(now_ms)
node "$H1" 0 2 "$MASTER" "$P" main0 ddpx0 "${train_long[@]}"
node "$H2" 1 2 "$MASTER" "$P" main1 ddpx0 "${train_long[@]}"
listen_h1="" listen_h2="" estab_h1="" reach_other=""
while running "${PID[main0]}" && (($(now_ms) - t0 < 30000)); do
  estab_h1=$(ip netns exec "$H1" ss -Htnp state established 2>/dev/null || true)
  # Gloo's pair: node 0's address to node 1's, on a port other than the store's.
  if grep -E "$MASTER:[0-9]+ +$net\.2:[0-9]+" <<<"$estab_h1" | grep -vq ":$P "; then
    listen_h1=$(ip netns exec "$H1" ss -Hltnp)
    listen_h2=$(ip netns exec "$H2" ss -Hltnp)
    # Can a third host reach the store through node 0's other address? (connect, then close)
    if ip netns exec "$H3" timeout 3 bash -c "exec 3<>/dev/tcp/$other/$P" 2>/dev/null; then
      reach_other=yes
    else
      reach_other=no
    fi
    break
  fi
  sleep 0.2
done
wait_exit "${PID[main0]}" 60000; rc0=$RC
wait_exit "${PID[main1]}" 10000; rc1=$RC
t_main=$(($(now_ms) - t0))
[[ "$rc0" == running ]] && stop "${PID[main0]}"
[[ "$rc1" == running ]] && stop "${PID[main1]}"
if [[ "$rc0" != 0 || "$rc1" != 0 ]]; then
  say "  node 0:"; tail -n 15 "$work/main0.out" | show
  say "  node 1:"; tail -n 15 "$work/main1.out" | show
  die "two-node training: node 0 exit $rc0, node 1 exit $rc1 (want 0 and 0)"
fi
grep -q '^Accuracy on test dataset - [0-9.]*$' "$work/main0.out" ||
  die "node 0 did not print 'Accuracy on test dataset - X' (see $work/main0.out)"
grep -q "world size 2 " "$work/main0.out" || die "node 0 did not report 'world size 2'"
grep -q "joined 2 ranks via $MASTER:$P (gloo," "$work/main0.out" ||
  die "node 0 did not join 2 ranks via $MASTER:$P over plain Gloo"
grep -q "1 worker(s) on node 1 of 2 (world size 2)" "$work/main1.out" ||
  die "node 1's launcher did not start rank 1 of world size 2"
grep -q '^Hello from local_rank 0, global_rank 1$' "$work"/main1.logs/*/rank1.log ||
  die "node 1 has no rank1.log naming global rank 1"
say "  ok: both exit 0 in $(secs "$t_main") s; $(grep '^Accuracy' "$work/main0.out"); $(grep -o 'joined 2 ranks via [^)]*)' "$work/main0.out")"
assert_no_leftovers "two-node training"

# The same job on one host (2 workers, 2 threads each as on the nodes): the numbers must match,
# since a sum of two gradients does not depend on the transport.
ref_rc=0
timeout 60 ip netns exec "$H3" "$DDPX" run 2 --threads_per_worker 2 --log_dir "$work/ref.logs" \
  -- train "${train_long[@]}" >"$work/ref.out" 2>&1 || ref_rc=$?
multi=$(grep -o 'loss_train - [0-9.]*' "$work/main0.out" | tail -n 1)
single=$(grep -o 'loss_train - [0-9.]*' "$work/ref.out" | tail -n 1 || true)
if [[ $ref_rc == 0 && "$multi" == "$single" ]] &&
  [[ "$(grep '^Accuracy' "$work/main0.out")" == "$(grep '^Accuracy' "$work/ref.out")" ]]; then
  say "  ok: the same numbers as one host with 2 workers ($multi, last epoch)"
else
  finding "two nodes ($multi; $(grep '^Accuracy' "$work/main0.out")) differ from one host with 2 workers (exit $ref_rc; ${single:-no loss}; $(grep '^Accuracy' "$work/ref.out" || true))"
fi
assert_no_leftovers "one-host reference run"

[[ -n "$listen_h1" ]] || die "never saw the Gloo connection between $MASTER and $net.2 while training"
say "  listening sockets on node 0 while training (ss -ltnp):"
show <<<"$listen_h1"
say "  on node 1:"
show <<<"$listen_h2"
say "  established on node 0:"
show <<<"$estab_h1"
store_local=$(awk -v p=":$P" '{ n = length($4) - length(p); if (n > 0 && substr($4, n + 1) == p) print $4 }' <<<"$listen_h1" | head -n 1)
case "$store_local" in
  "$MASTER:$P") say "  (a) the TCPStore listens on $store_local: the master address only" ;;
  "*:$P" | "0.0.0.0:$P" | "[::]:$P" | "[::ffff:0.0.0.0]:$P")
    finding "(a) rank 0's TCPStore listens on $store_local (every interface, IPv4 and IPv6), not on --master_addr $MASTER:$P; another host connected to it through node 0's other address $other:$P: $reach_other" ;;
  "") die "(a) nothing listened on port $P on node 0 while the job ran" ;;
  *) finding "(a) rank 0's TCPStore listens on $store_local, not on --master_addr $MASTER:$P" ;;
esac
gloo_h1=$(grep ddpx-torch <<<"$listen_h1" | awk '{print $4}' | grep -v ":$P\$" | tr '\n' ' ')
gloo_h2=$(grep ddpx-torch <<<"$listen_h2" | awk '{print $4}' | tr '\n' ' ')
if [[ "$gloo_h1" == "$MASTER:"* && "$gloo_h2" == "$net.2:"* ]]; then
  say "  (b) GLOO_SOCKET_IFNAME=ddpx0 is honoured: Gloo listens on ${gloo_h1}(node 0) and ${gloo_h2}(node 1)"
else
  die "(b) Gloo did not bind ddpx0's address: node 0 listens on '$gloo_h1', node 1 on '$gloo_h2'"
fi

# ---- 2. (b) GLOO_SOCKET_IFNAME gone wrong ----------------------------------------------------
say "== 2. GLOO_SOCKET_IFNAME: bogus on both / bogus on node 1 / a list / unset (in parallel)"
short=(--dataset synthetic --model mlp --batch_size 64 --synthetic_size 256 --num_epochs 1
  --transport gloo)
Pb1=$(port) Pb2=$(port) Pb3=$(port) Pb4=$(port)
T0=$(now_ms)
node "$H1" 0 2 "$MASTER" "$Pb1" bogus0 bogus0 "${short[@]}" --timeout 20
node "$H2" 1 2 "$MASTER" "$Pb1" bogus1 bogus0 "${short[@]}" --timeout 20
node "$H1" 0 2 "$MASTER" "$Pb2" half0 ddpx0 "${short[@]}" --timeout 4
node "$H3" 1 2 "$MASTER" "$Pb2" half1 bogus0 "${short[@]}" --timeout 4
node "$H1" 0 2 "$MASTER" "$Pb3" list0 ddpx0,ddpx0 "${short[@]}" --timeout 20
node "$H2" 1 2 "$MASTER" "$Pb3" list1 ddpx0,ddpx0 "${short[@]}" --timeout 20
node "$H1" 0 2 "$MASTER" "$Pb4" unset0 - "${short[@]}" --timeout 2
node "$H3" 1 2 "$MASTER" "$Pb4" unset1 - "${short[@]}" --timeout 2
wait_all 40000 bogus0 bogus1 half0 half1 list0 list1 unset0 unset1
say "  bogus0 on both nodes: node 0 exit ${code[bogus0]} after $(secs "${took[bogus0]}") s, node 1 exit ${code[bogus1]} after $(secs "${took[bogus1]}") s; node 0 says:"
errors "$work/bogus0.out" 1 | show
[[ "${code[bogus0]}" != 0 && "${code[bogus0]}" != running && "${code[bogus1]}" != 0 ]] ||
  die "(b) GLOO_SOCKET_IFNAME=bogus0 did not make both nodes fail"
grep -q "bogus0" "$work/bogus0.out" || die "(b) the error does not name the bogus interface"
((took[bogus0] < 10000)) || finding "(b) a bogus GLOO_SOCKET_IFNAME took $(secs "${took[bogus0]}") s to fail"

say "  bogus0 on node 1 only (--timeout 4): node 1 exit ${code[half1]} after $(secs "${took[half1]}") s, node 0 exit ${code[half0]} after $(secs "${took[half0]}") s; node 0 says:"
errors "$work/half0.out" 1 | show
[[ "${code[half0]}" != 0 && "${code[half0]}" != running ]] || die "(b) node 0 did not fail when node 1's Gloo device failed"
# Node 1 fails at once; node 0 should follow within a second or two, not after --timeout.
if ((took[half0] - took[half1] >= 3000)); then
  finding "(b) when node 1 fails to open its Gloo device, node 0 is not told: it goes on waiting for the whole --timeout (node 1 failed after $(secs "${took[half1]}") s, node 0 after $(secs "${took[half0]}") s with --timeout 4; 30 min by default) and its message does not name rank 1's failure"
fi

say "  GLOO_SOCKET_IFNAME=ddpx0,ddpx0 (PyTorch's comma list): node 0 exit ${code[list0]}, node 1 exit ${code[list1]} after $(secs "${took[list0]}") s"
if [[ "${code[list0]}" != 0 ]]; then
  errors "$work/list0.out" 1 | show
  finding "(b) a comma-separated GLOO_SOCKET_IFNAME (accepted by PyTorch's init_process_group) is taken as one interface name and fails"
fi

say "  GLOO_SOCKET_IFNAME unset (--timeout 2; this host's name $(hostname) resolves to '$(getent hosts "$(hostname)" | awk '{print $1}' | tr '\n' ' ')'): node 0 exit ${code[unset0]} after $(secs "${took[unset0]}") s, node 1 exit ${code[unset1]} after $(secs "${took[unset1]}") s"
errors "$work/unset0.out" 1 | show
errors "$work/unset1.out" 1 | show
if [[ "${code[unset0]}" != 0 || "${code[unset1]}" != 0 ]]; then
  if grep -q '127\.0\.0\.1\|127\.0\.1\.1' "$work/unset0.out" "$work/unset1.out"; then
    finding "(b) without GLOO_SOCKET_IFNAME a multi-node job binds Gloo to the hostname's address, here loopback, and fails; the slower node took $(secs $((took[unset0] > took[unset1] ? took[unset0] : took[unset1]))) s with --timeout 2"
  else
    finding "(b) without GLOO_SOCKET_IFNAME the multi-node job fails"
  fi
fi
say "  NCCL_SOCKET_IFNAME: ddpx does not read it; NCCL does, and this host has no GPU to test it"
assert_no_leftovers "GLOO_SOCKET_IFNAME cases"

# ---- 3. (c) node 1's worker SIGKILLed mid-training -------------------------------------------
say "== 3. node 1's worker killed (SIGKILL) mid-training"
Pc=$(port)
train_kill=(--dataset synthetic --model mlp --batch_size 64 --synthetic_size 512 --num_epochs 1000
  --transport gloo --timeout 30)
node "$H1" 0 2 "$MASTER" "$Pc" kill0 ddpx0 "${train_kill[@]}"
node "$H2" 1 2 "$MASTER" "$Pc" kill1 ddpx0 "${train_kill[@]}"
t0=$(now_ms)
until grep -q '^Epoch - 3/' "$work/kill0.out"; do
  running "${PID[kill0]}" || { tail -n 20 "$work/kill0.out" | show; die "(c) node 0 ended before epoch 3"; }
  (($(now_ms) - t0 < 30000)) || die "(c) training did not reach epoch 3 within 30 s"
  sleep 0.1
done
victim=""
for pid in $(ip netns pids "$H2"); do
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == ddpx-torch ]] && victim=$pid
done
[[ -n "$victim" ]] || die "(c) no ddpx-torch worker in $H2"
t0=$(now_ms)
kill -KILL "$victim"
wait_exit "${PID[kill0]}" 60000; rc0=$RC; t_c0=$(($(now_ms) - t0))
wait_exit "${PID[kill1]}" 10000; rc1=$RC; t_c1=$(($(now_ms) - t0))
[[ "$rc0" == running ]] && stop "${PID[kill0]}"
[[ "$rc1" == running ]] && stop "${PID[kill1]}"
say "  kill -KILL $victim (rank 1): node 1's launcher exit $rc1 after $(secs "$t_c1") s; node 0's exit $rc0 after $(secs "$t_c0") s"
say "  node 1 says:"
errors "$work/kill1.out" 1 | show
say "  node 0 says:"
errors "$work/kill0.out" 6 | show
[[ "$rc1" == 137 ]] || die "(c) node 1's launcher should exit 137 (its worker got SIGKILL), got $rc1"
[[ "$rc0" != 0 && "$rc0" != running ]] || die "(c) node 0 did not fail after rank 1 died (exit $rc0)"
((t_c0 < 10000)) || finding "(c) node 0 took $(secs "$t_c0") s to end after rank 1 was killed"
grep -Eq '^ddpx: error.*rank\(?s?\)? 1\b' "$work/kill0.out" ||
  finding "(c) node 0's error does not name rank 1"
if grep -q 'no rank is behind by the record: every rank waits' "$work/kill0.out"; then
  finding "(c) node 0's launcher verdict says 'no rank is behind ... every rank waits in seq N' though rank 1 (another node, no record here) is dead; its worker said rank 1 is behind"
fi
assert_no_leftovers "SIGKILL of node 1"

# ---- 4. (d) a wrong --master_addr ------------------------------------------------------------
say "== 4. --master_addr that does not resolve / is not node 0's / nobody's (--timeout 3, in parallel)"
Pd1=$(port) Pd2=$(port) Pd3=$(port) Pd4=$(port) Pd5=$(port)
T0=$(now_ms)
node "$H1" 0 2 no.such.host "$Pd1" nohost0 ddpx0 "${short[@]}" --timeout 3
node "$H2" 1 2 no.such.host "$Pd4" nohost1 ddpx0 "${short[@]}" --timeout 3
node "$H1" 0 2 "$net.2" "$Pd2" notmine0 ddpx0 "${short[@]}" --timeout 3
node "$H1" 0 2 "$net.99" "$Pd3" nobody0 ddpx0 "${short[@]}" --timeout 3
node "$H3" 0 2 no.such.host "$Pd5" nohostdef0 ddpx0 "${short[@]}"  # default --timeout 1800
wait_all 40000 nohost0 nohost1 notmine0 nobody0
wait_all 10000 nohostdef0
for pair in "nohost0 node 0, --master_addr no.such.host" "nohost1 node 1, --master_addr no.such.host" \
  "notmine0 node 0, --master_addr $net.2 (node 1's address)" "nobody0 node 0, --master_addr $net.99 (no host)"; do
  read -r v label <<<"$pair"
  say "  $label: exit ${code[$v]} after $(secs "${took[$v]}") s:"
  errors "$work/$v.out" 1 | show
  [[ "${code[$v]}" != 0 && "${code[$v]}" != running ]] || die "(d) $label did not fail"
done
# A check before anything starts would fail as fast as a bogus interface name did in step 2.
if ((took[nohost0] - took[bogus0] >= 2000 || took[notmine0] - took[bogus0] >= 2000)); then
  finding "(d) a --master_addr that does not resolve, or is not an address of node 0, is only found out when --timeout runs out ($(secs "${took[nohost0]}") s and $(secs "${took[notmine0]}") s with --timeout 3, against $(secs "${took[bogus0]}") s for a bogus interface name); the launcher could check it before starting anything"
fi
# What should the user read? That no.such.host does not resolve, that $net.2 is not node 0's.
for v in nohost0 notmine0; do
  line=$(errors "$work/$v.out" 1)
  if ! grep -Eiq 'resolv|not (an address|a local address|on this host|one of this host)' <<<"$line"; then
    finding "(d) $v: the error does not say what is wrong with --master_addr; it says: ${line:0:230}..."
  fi
done
if grep -q 'accepted the connection but did not answer' "$work"/{nohost0,nohost1,notmine0,nobody0}.out; then
  finding "(d) at least one wrong-master case reports 'the rendezvous ... accepted the connection but did not answer ... not this job's rendezvous' though nothing accepted anything (the deadline watchdog in rendezvous_with_deadline fires while the TCPStore client is still retrying)"
fi
if [[ "${code[nohostdef0]}" == running || "${code[nohostdef0]}" == 143 ]]; then
  finding "(d) with the default --timeout, node 0 with --master_addr no.such.host was still retrying after $(secs "${took[nohostdef0]}") s (stopped by the test); it would retry for 30 min"
fi
assert_no_leftovers "wrong --master_addr"

# ---- 5. run-ddp.sh (the seed's form) across three namespaces ---------------------------------
if [[ -x "$repo/run-ddp.sh" ]]; then
  say "== 5. run-ddp.sh 1 auto $MASTER script_multi_node \"...\" on three nodes (NNODES=3)"
  Pr=$(port)
  t0=$(now_ms)
  rpids=()
  for r in 0 1 2; do
    GLOO_SOCKET_IFNAME=ddpx0 NNODES=3 NODE_RANK=$r MASTER_PORT=$Pr DDPX_BIN=$DDPX \
      DDPX_RUN_ARGS="--log_dir $work/rdd$r.logs --grace_s 1" \
      ip netns exec "${hosts[r]}" "$repo/run-ddp.sh" 1 auto "$MASTER" script_multi_node \
      "--dataset synthetic --model mlp --batch_size 64 --synthetic_size 256 --num_epochs 1 --transport gloo --timeout 30" \
      >"$work/rdd$r.out" 2>&1 &
    rpids+=("$!")
  done
  for r in 0 1 2; do
    wait_exit "${rpids[r]}" 60000
    [[ "$RC" == running ]] && stop "${rpids[r]}"
    [[ "$RC" == 0 ]] || { tail -n 15 "$work/rdd$r.out" | show; die "run-ddp.sh on node $r: exit $RC"; }
  done
  grep -q '^Accuracy on test dataset - ' "$work/rdd0.out" || die "run-ddp.sh: node 0 printed no accuracy"
  grep -q "world size 3 " "$work/rdd0.out" || die "run-ddp.sh: node 0 did not report world size 3"
  say "  ok: three nodes exit 0 in $(secs $(($(now_ms) - t0))) s; $(grep -o 'joined 3 ranks via [^)]*)' "$work/rdd0.out")"
  assert_no_leftovers "run-ddp.sh"

  say "== 5b. the identical command on three nodes: no NODE_RANK, no NNODES (ranks and count at rendezvous)"
  Pr=$(port)
  t0=$(now_ms)
  rpids=()
  for r in 2 0 1; do  # node 0 (the host of MASTER) is not the first to start
    GLOO_SOCKET_IFNAME=ddpx0 MASTER_PORT=$Pr DDPX_BIN=$DDPX \
      DDPX_RUN_ARGS="--log_dir $work/rdz$r.logs --grace_s 1 --rdzv_last_call 2" \
      ip netns exec "${hosts[r]}" "$repo/run-ddp.sh" 1 auto "$MASTER" script_multi_node \
      "--dataset synthetic --model mlp --batch_size 64 --synthetic_size 256 --num_epochs 1 --transport gloo --timeout 30" \
      >"$work/rdz$r.out" 2>&1 &
    rpids[r]=$!
    sleep 0.3
  done
  for r in 0 1 2; do
    wait_exit "${rpids[r]}" 60000
    [[ "$RC" == running ]] && stop "${rpids[r]}"
    [[ "$RC" == 0 ]] || { tail -n 15 "$work/rdz$r.out" | show; die "identical command on node $r: exit $RC"; }
  done
  grep -q "node rank 0 of 3 nodes, assigned at rendezvous" "$work/rdz0.out" ||
    { show <"$work/rdz0.out"; die "the host of $MASTER was not given node rank 0 of 3"; }
  grep -q '^Accuracy on test dataset - ' "$work/rdz0.out" || die "identical command: node 0 printed no accuracy"
  grep -q "world size 3 " "$work/rdz0.out" || die "identical command: node 0 did not report world size 3"
  say "  ok: ranks and count at rendezvous, three nodes exit 0 in $(secs $(($(now_ms) - t0))) s"
  assert_no_leftovers "identical command"
else
  say "== 5. run-ddp.sh: not in $repo, skipped"
fi

# ---- 6. (c) node 1's host drops off the network ----------------------------------------------
say "== 6. node 1's link goes down, then its worker dies (no FIN/RST reaches node 0; --timeout 6)"
Pe=$(port)
train_drop=("${train_kill[@]:0:${#train_kill[@]}-2}" --timeout 6)
node "$H1" 0 2 "$MASTER" "$Pe" drop0 ddpx0 "${train_drop[@]}"
node "$H2" 1 2 "$MASTER" "$Pe" drop1 ddpx0 "${train_drop[@]}"
t0=$(now_ms)
until grep -q '^Epoch - 3/' "$work/drop0.out"; do
  running "${PID[drop0]}" || { tail -n 20 "$work/drop0.out" | show; die "(c) node 0 ended before epoch 3"; }
  (($(now_ms) - t0 < 30000)) || die "(c) training did not reach epoch 3 within 30 s"
  sleep 0.1
done
ip -n "$H2" link set ddpx0 down
t0=$(now_ms)
for pid in $(ip netns pids "$H2"); do
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == ddpx-torch ]] && kill -KILL "$pid"
done
wait_exit "${PID[drop0]}" 40000; rc0=$RC; t_e0=$(($(now_ms) - t0))
[[ "$rc0" == running ]] && stop "${PID[drop0]}"
wait_exit "${PID[drop1]}" 10000
[[ "$RC" == running ]] && stop "${PID[drop1]}"
ip -n "$H2" link set ddpx0 up
say "  node 0 exit $rc0 after $(secs "$t_e0") s:"
errors "$work/drop0.out" 3 | show
[[ "$rc0" != 0 && "$rc0" != running ]] || die "(c) node 0 did not fail after node 1 dropped off (exit $rc0)"
((t_e0 >= 4000)) && finding "(c) a node that vanishes without closing its connections is noticed only after --timeout ($(secs "$t_e0") s with --timeout 6; 30 min with the default 1800 s)"
assert_no_leftovers "node 1 off the network"

# ---- summary ---------------------------------------------------------------------------------
total=$((${EPOCHREALTIME//[.,]/} / 1000 - t_start / 1000))
say "== done in $(secs "$total") s: ${#findings[@]} finding(s)"
for f in "${findings[@]}"; do say "  - $f"; done
if [[ "$STRICT" == 1 && ${#findings[@]} -gt 0 ]]; then
  die "DDPX_NETNS_STRICT=1 and ${#findings[@]} finding(s)"
fi
say "PASS"
