#!/usr/bin/env bash
# The compose stack end to end under a real Docker engine, as docs/observability.md tells it, with every
# command, its output, exit code and duration in one transcript:
#   1. build the image from scratch (--no-cache: what a first `up --build` does), then
#      `docker compose up -d --build --wait` (the hops, Prometheus)
#   2. the documented Locust step (retry-storm, its own phases), then the hops' container ids again
#   3. `drill run compose/stack.yaml --trials 1` from the repository's .venv on the host
#   4. LEDGER_REPLICAS=3: the ledgers' calls per replica; a Locust worker mismatch (the master's exit 1
#      is compose's); UI mode (LOCUST_HEADLESS=false) exits after its phases
#   5. `down -v`
# Usage, from the repository root, on committed code (the transcript names the commit):
#   bash benchmarks/compose_e2e.sh > benchmarks/results/compose-e2e-$(git rev-parse --short HEAD).txt 2>&1
# Services are named (gateway order account ledger prometheus): Grafana and Jaeger are left out, so a
# machine without them (no Docker Hub: local stand-in images, PYTHON_IMAGE=python:3.11.13-slim-bookworm
# to build on the stand-in's tag) runs it too. It removes the containers and volumes it created; the
# image stays.
set -uo pipefail
cd "$(dirname "$0")/.."
F=compose/docker-compose.yml
HOPS="gateway order account ledger"
OUT=out/compose-e2e

. benchmarks/_transcript.sh  # step, query

echo "# compose end to end: $(date -u +%FT%TZ)"
echo "# commit: $(git rev-parse --short HEAD)$(git status --porcelain -- compose harness loadtests benchmarks/compose_e2e.sh benchmarks/_transcript.sh | grep -q . && echo ' + uncommitted changes')"
echo "# $(docker version --format 'Docker Engine {{.Server.Version}}'), $(docker compose version), $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# PYTHON_IMAGE=${PYTHON_IMAGE:-(unset: the base image by digest)}"
docker compose -f $F --profile load down -v >/dev/null 2>&1
docker image rm drill-harness:0.1.0 >/dev/null 2>&1  # a fresh start: the image is built again below

step "1a. build the image from scratch" docker compose -f $F build --no-cache ledger
step "1b. start the hops and Prometheus" docker compose -f $F up -d --build --wait $HOPS prometheus
step "1c. one image; dangling images on the engine (a rebuild leaves the previous image dangling)" \
  "docker images drill-harness; docker images -f dangling=true --format 'dangling: {{.ID}} {{.CreatedSince}} {{.Size}}'"
step "1d. the image's /app" docker run --rm drill-harness:0.1.0 ls -a /app
step "1e. what is published, and where" "docker compose -f $F ps --format '{{.Name}} {{.ID}} {{.CreatedAt}} {{.Ports}}' | tee /tmp/compose-e2e-ps-before.txt"
step "1f. Prometheus' lifecycle endpoint is closed" "curl -s -w ' [HTTP %{http_code}]\n' -X POST http://127.0.0.1:9090/-/reload"
step "1g. Prometheus sees the hops" "query 'up{job=\"drill-services\"}'"

step "2a. the documented Locust step (retry-storm)" \
  LOCUST_WORKERS=2 docker compose -f $F --profile load up --exit-code-from locust-master locust-master locust-worker
step "2b. the master's exit code and closing summary (compose stopped following at a worker's exit)" \
  "docker inspect drill-locust-master-1 --format 'exit code {{.State.ExitCode}}'; docker compose -f $F logs --no-log-prefix locust-master | tail -n 22"
step "2c. the hops were not recreated" \
  "docker compose -f $F ps --format '{{.Name}} {{.ID}} {{.CreatedAt}} {{.Ports}}' $HOPS prometheus | diff /tmp/compose-e2e-ps-before.txt - && echo same containers"

step "3. drill run compose/stack.yaml --trials 1" ".venv/bin/drill run compose/stack.yaml --trials 1 --out $OUT"
step "3b. its results" ".venv/bin/python -c \"import json; r = json.load(open('$OUT/results.json')); print({k: (len(v['trials']), [t['hits'] for t in v['trials']]) for k, v in r['configs'].items()}); print(r['verdict']['text'])\""

export LEDGER_REPLICAS=3
step "4a. LEDGER_REPLICAS=3" docker compose -f $F up -d --wait $HOPS
step "4b. the switch keeps the scale (LEDGER_REPLICAS exported)" \
  DRILL_CONFIG=resilient docker compose -f $F up -d --wait $HOPS
step "4c. a short retry-storm profile on three ledgers" \
  DRILL_CONFIG=resilient LOCUST_WORKERS=2 LOCUST_DRILL_PHASES=warmup=5,fault=10,recovery=10 \
  docker compose -f $F --profile load up --exit-code-from locust-master locust-master locust-worker \
  "2>&1 | grep -E 'drill phase|exited with|Aborting'"
step "4d. ledger calls per replica over the profile" \
  "sleep 3; query 'sum by (instance) (increase(drill_server_calls_total{compose_service=\"ledger\"}[40s]))'"
step "4e. a worker mismatch: the master gives up, compose says so" \
  DRILL_CONFIG=resilient LOCUST_WORKERS=2 docker compose -f $F --profile load up --exit-code-from locust-master \
  --scale locust-worker=1 locust-master locust-worker "2>&1 | grep -E 'Gave up|exited with|Aborting|Shutting down'"
step "4f. UI mode exits after its phases (LOCUST_AUTOQUIT=5)" \
  DRILL_CONFIG=resilient LOCUST_HEADLESS=false LOCUST_AUTOQUIT=5 LOCUST_WORKERS=1 \
  LOCUST_DRILL_PHASES=warmup=2,fault=3,recovery=3 docker compose -f $F --profile load up \
  --exit-code-from locust-master locust-master locust-worker "2>&1 | grep -E 'web interface|Shape test|autoquit|exited with|Shutting down'"

step "5. clean up" docker compose -f $F --profile load down -v
