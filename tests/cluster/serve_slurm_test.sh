#!/usr/bin/env bash
# `ddpx serve --scheduler slurm` against a real Slurm (one node, brought up by slurm_cluster.sh),
# over real HTTP (curl):
#   1. a 2-worker train job submitted to the service becomes a Slurm job named svcID (squeue
#      shows it); the service reports it running, then ended with exit code 0 and Slurm's
#      state COMPLETED; each rank's log comes back through the API (rank 0: one job of world
#      size 2 found from Slurm's variables, its accuracy) and the epoch metrics are read;
#   2. requests Slurm cannot honour get a 400 naming the cause, and nothing is kept: more
#      workers than the node has CPUs (sbatch --test-only's reason), extra ports;
#   3. a longer job: a snapshot asked over the API is written mid-run (SIGUSR1 to the tasks
#      through scancel) and listed; stopping it (scancel) ends it with 143 and Slurm's
#      CANCELLED, and none of its processes is left;
#   4. the service killed with SIGKILL while a job runs: restarted on the same state folder,
#      it follows the job to its end (exit 0).
# Usage: serve_slurm_test.sh [PATH_TO_DDPX]   (or DDPX=...). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

CLUSTER_TEST_NAME=serve_slurm_test
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/slurm_cluster.sh
source "$here/slurm_cluster.sh"

cluster_require curl curl
slurm_cluster_setup "$@"

# Job N meets at port 20000+N%20000 (the script's rule): number this cluster's jobs from a free
# port P, so that job P uses port P even with another cluster test running beside this one.
cluster_free_port first_id
echo "FirstJobId=$first_id" >>"$SLURM_CONF"
timeout 10 scontrol reconfigure || cluster_fail "scontrol reconfigure (FirstJobId=$first_id) failed"

state=$work/state
cluster_free_port api_port
url=http://127.0.0.1:$api_port
service_pid=

start_service() {
  "$DDPX" serve --scheduler slurm --state "$state" --listen "127.0.0.1:$api_port" \
    >>"$work/service.log" 2>&1 &
  service_pid=$!
  for ((i = 0; i < 100; i++)); do
    curl -fsS "$url/api/v1/health" >"$work/health.json" 2>/dev/null && return 0
    cluster_alive "$service_pid" || cluster_fail "ddpx serve --scheduler slurm exited: $(cluster_show "$work/service.log")"
    sleep 0.1
  done
  cluster_fail "ddpx serve did not answer on $url within 10 s: $(cluster_show "$work/service.log")"
}
stop_service() { [[ -z $service_pid ]] || kill -TERM "$service_pid" 2>/dev/null || true; }
cluster_add_cleanup stop_service

token=$("$DDPX" serve --state "$state" token add alice) || cluster_fail "ddpx serve token add failed"
start_service
grep -q '"scheduler":"slurm"' "$work/health.json" ||
  cluster_fail "/api/v1/health does not say scheduler slurm: $(cat "$work/health.json")"

# api METHOD PATH [BODY]: the answer's body in $body, its status in $status.
api() {
  local out=$work/answer
  status=$(curl -sS -o "$out" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' ${3+--data "$3"} "$url$2") ||
    cluster_fail "curl $1 $2 failed"
  body=$(cat "$out")
}
# json EXPR: EXPR (Python, on `j`) of the last answer.
json() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)" <<<"$body"; }

# wait_state ID STATE [TIMEOUT_S]: poll the job until the service reports STATE.
wait_state() {
  local id=$1 want=$2 limit=${3:-60} t0
  t0=$(date +%s)
  while :; do
    api GET "/api/v1/jobs/$id"
    [[ $(json "j['state']") == "$want" ]] && return 0
    (($(date +%s) - t0 < limit)) || cluster_fail "job $id not $want after $limit s: $body
$(timeout 5 squeue -l 2>&1 || true)"
    sleep 0.2
  done
}

job_json() {  # job_json ARGS...: the request body for `train ARGS` on 2 workers
  python3 -c 'import json,sys; print(json.dumps({"command": ["train"] + sys.argv[1:], "workers": 2}))' "$@"
}

# --- 1. a job through Slurm, to its end ------------------------------------------------------
api POST /api/v1/jobs "$(job_json "${train[@]:1}")"
[[ $status == 201 ]] || cluster_fail "POST /api/v1/jobs: $status $body"
id=$(json "j['id']")
slurm_id=$(json "(j.get('slurm') or {}).get('id', '')")
[[ $slurm_id =~ ^[0-9]+$ ]] || cluster_fail "the new job has no Slurm job id: $body"
name=$(timeout 10 squeue -h -j "$slurm_id" -o %j 2>/dev/null || true)
name=${name:-$(_slurm_cluster_field "$slurm_id" JobName)}
[[ $name == "svc$id" ]] || cluster_fail "Slurm job $slurm_id is named '$name', expected svc$id"
wait_state "$id" ended 90
[[ $(json "j['exit_code']") == 0 && $(json "j['slurm']['state']") == COMPLETED ]] ||
  cluster_fail "job $id ended: $body
$(cluster_show "$state"/logs/svc"$id"-*.out "$state/logs/svc$id/rank0.log")"
script=$state/slurm/svc$id.sbatch
for line in '#SBATCH --job-name=svc'"$id" '#SBATCH --nodes=1' '#SBATCH --ntasks-per-node=2'; do
  grep -qxF -- "$line" "$script" || cluster_fail "$script lacks '$line': $(cluster_show "$script")"
done
grep -qE "^srun --kill-on-bad-exit=1 --output=$state/logs/svc$id/rank%t.log .*ddpx train " "$script" ||
  cluster_fail "$script does not srun ddpx train with per-rank logs: $(cluster_show "$script")"
api GET "/api/v1/jobs/$id/logs?rank=0"
printf '%s\n' "$body" >"$work/rank0.log"
ddpx_assert_trained "$work/rank0.log" 2 slurm "$node" $((20000 + slurm_id % 20000))
api GET "/api/v1/jobs/$id/logs?rank=1"
# Only rank 0 prints when all goes well; rank 1's log exists (srun --output=.../rank%t.log).
[[ $status == 200 && -f $state/logs/svc$id/rank1.log ]] ||
  cluster_fail "rank 1's log: $status '$body'; $(ls -la "$state/logs/svc$id")"
api GET "/api/v1/jobs/$id/metrics"
[[ $(json "len(j['epochs'])") == 1 ]] || cluster_fail "job $id's metrics have no epoch: $body"
cluster_pass "job $id ran as Slurm job $slurm_id (svc$id): ended 0, COMPLETED; rank logs and metrics served"

# --- 2. requests Slurm cannot honour ---------------------------------------------------------
api GET /api/v1/jobs
before=$(json "len(j)")
api POST /api/v1/jobs '{"command": ["train", "--model", "mlp"], "workers": 64}'
[[ $status == 400 && $body == *"Slurm cannot run 64 worker(s) on 1 node(s)"* ]] ||
  cluster_fail "64 workers on a 4-CPU node: expected 400 with Slurm's reason, got $status $body"
cluster_pass "64 workers: 400, $(json "j['error']")"
api POST /api/v1/jobs '{"command": ["train", "--model", "mlp"], "workers": 2, "nodes": 2}'
[[ $status == 400 && $body == *"Slurm cannot run 2 worker(s) on 2 node(s)"* ]] ||
  cluster_fail "2 nodes on a 1-node cluster: expected 400 with Slurm's reason, got $status $body"
cluster_pass "2 nodes of a 1-node cluster: 400, $(json "j['error']")"
rc=0
"$DDPX" submit --server "$url" --token "$token" -n 2 --nodes 2 -- train --model mlp >submit.out 2>submit.err || rc=$?
[[ $rc == 2 && ! -s submit.out ]] && grep -q "answered 400: workers: Slurm cannot run 2 worker(s) on 2 node(s)" submit.err ||
  cluster_fail "ddpx submit --nodes 2: exited $rc, expected 2 with the service's reason: $(cluster_show submit.out submit.err)"
api POST /api/v1/jobs '{"command": ["train", "--model", "mlp"], "workers": 3, "nodes": 2}'
[[ $status == 400 && $body == *"spread evenly"* ]] ||
  cluster_fail "3 workers on 2 nodes: expected 400, got $status $body"
api POST /api/v1/jobs '{"command": ["train", "--model", "mlp"], "workers": 1, "ports": 1}'
[[ $status == 400 && $body == *"ports"* ]] || cluster_fail "extra ports with Slurm: expected 400, got $status $body"
why=$(json "j['error']")
api GET /api/v1/jobs
[[ $(json "len(j)") == "$before" ]] || cluster_fail "a refused request left a job: $body"
cluster_pass "extra ports: 400, $why; no job kept"

# --- 3. snapshot and stop ----------------------------------------------------------------------
long=(--dataset synthetic --model resnet20 --num_epochs 20 --batch_size 64 --synthetic_size 512
  --threads 1 --device cpu --timeout 30)
api POST /api/v1/jobs "$(job_json "${long[@]}")"
[[ $status == 201 ]] || cluster_fail "POST /api/v1/jobs (long): $status $body"
id=$(json "j['id']")
slurm_id=$(json "j['slurm']['id']")
wait_state "$id" running 60
for ((i = 0; ; i++)); do  # the first epoch's end: the workers are training
  grep -q '^Epoch - 0/20' "$state/logs/svc$id/rank0.log" 2>/dev/null && break
  ((i < 300)) || cluster_fail "job $id trained no epoch in 60 s: $(cluster_show "$state/logs/svc$id/rank0.log")"
  sleep 0.2
done
api POST "/api/v1/jobs/$id/snapshots" ""
[[ $status == 202 ]] || cluster_fail "POST snapshots: $status $body"
for ((i = 0; ; i++)); do
  api GET "/api/v1/jobs/$id/snapshots"
  [[ $(json "sum(1 for c in j if c['kind'] == 'snapshot')") -ge 1 ]] && break
  ((i < 150)) || cluster_fail "no snapshot listed 30 s after the request: $body
$(cluster_show "$state/logs/svc$id/rank0.log")"
  sleep 0.2
done
snapshot=$(json "[c['name'] for c in j if c['kind'] == 'snapshot'][0]")
grep -qE "^Snapshot - epoch [0-9]+ step [0-9]+/[0-9]+: .*/$snapshot\$" "$state/logs/svc$id/rank0.log" ||
  cluster_fail "rank 0 did not log its snapshot $snapshot: $(cluster_show "$state/logs/svc$id/rank0.log")"
api GET "/api/v1/jobs/$id"
[[ $(json "j['state']") == running ]] || cluster_fail "the job did not go on after its snapshot: $body"
cluster_pass "snapshot of Slurm job $slurm_id mid-run: $snapshot listed, the job goes on"

api POST "/api/v1/jobs/$id/stop" ""
[[ $status == 200 ]] || cluster_fail "POST stop: $status $body"
wait_state "$id" ended 60
[[ $(json "j['exit_code']") == 143 && $(json "j['slurm']['state']") == CANCELLED ]] ||
  cluster_fail "the stopped job ended: $body"
slurm_cluster_assert_nothing_left "$slurm_id" "stopped job $slurm_id"
cluster_pass "stop: job $id ended 143, Slurm CANCELLED, nothing left"

# --- 4. the service killed and restarted while a job runs ---------------------------------------
short=("${long[@]}")
short[5]=3  # --num_epochs
api POST /api/v1/jobs "$(job_json "${short[@]}")"
[[ $status == 201 ]] || cluster_fail "POST /api/v1/jobs (restart): $status $body"
id=$(json "j['id']")
wait_state "$id" running 60
{
  kill -KILL "$service_pid"
  wait "$service_pid" || true
} 2>/dev/null
start_service
wait_state "$id" ended 120
[[ $(json "j['exit_code']") == 0 ]] || cluster_fail "job $id after the service's restart: $body"
api GET "/api/v1/jobs/$id/logs?rank=0"
[[ $body == *"Accuracy on test dataset"* ]] || cluster_fail "job $id's log after the restart: $body"
cluster_pass "service killed (SIGKILL) and restarted: job $id followed to its end (exit 0)"
