#!/usr/bin/env bash
# The Go ledger behind `drill proxy` in the compose stack (compose/ledger-go.yml), under a real Docker engine, as
# docs/proxy.md tells it, with every command, its output (the live view's lines included), exit code and wall
# time in one transcript:
#   1. `up -d --build --wait` the hops (the ledger is the Go server behind the proxy) and Prometheus
#   2. `drill run compose/stack-go.yaml --dry-run`, then `--trials 2` (its live lines: the hops' rates read from
#      Prometheus while each trial runs), and what results.json says of each trial
#   3. the Locust profile, and the proxy's own counters in Prometheus (hits; refusals at its limits)
#   4. `down -v`
# Usage, from the repository root, on committed code (the transcript names the commit):
#   bash benchmarks/compose_go.sh > benchmarks/results/compose-go-$(git rev-parse --short HEAD).txt 2>&1
# Services are named (Grafana and Jaeger left out), so a machine without Docker Hub runs it on local stand-in
# images of the two base images (PYTHON_IMAGE=python:3.11.13-slim-bookworm to build on the stand-in's tag). It
# removes the containers and volumes it created.
set -uo pipefail
cd "$(dirname "$0")/.."
F="-f compose/docker-compose.yml -f compose/ledger-go.yml"
OUT=out/compose-go

. benchmarks/_transcript.sh  # step, query

echo "# compose/ledger-go.yml under a real Docker engine: $(date -u +%FT%TZ)"
echo "# commit: $(git rev-parse --short HEAD)$(git status --porcelain -- compose harness loadtests benchmarks/compose_go.sh benchmarks/_transcript.sh | grep -q . && echo ' + uncommitted changes')"
echo "# $(docker version --format 'Docker Engine {{.Server.Version}}'), $(docker compose version), $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# PYTHON_IMAGE=${PYTHON_IMAGE:-(unset: the base image by digest)}"
docker compose $F --profile load down -v >/dev/null 2>&1
rm -rf "$OUT"

step "1a. the hops (the ledger: the Go server behind drill proxy) and Prometheus" \
  docker compose $F up -d --build --wait gateway order account ledger prometheus
step "1b. what runs" "docker compose $F ps --format '{{.Service}} {{.Image}} {{.Status}}'"
step "1c. the proxy's limits, as it started" "docker compose $F logs --no-log-prefix ledger | grep -m1 'proxy ledger'"
step "2a. the dry run" .venv/bin/drill run compose/stack-go.yaml --dry-run
step "2b. two trials of each configuration (the live view's lines: each hop's rate read from Prometheus)" \
  .venv/bin/drill run compose/stack-go.yaml --trials 2 --out $OUT
step "2c. what results.json says of each trial" ".venv/bin/python -c \"import json; r = json.load(open('$OUT/results.json'))
for k, v in r['configs'].items():
    for t in v['trials']:
        print(k, t['trial'], 'breached', t['breached'], 'amplification', t['amplification'], 'hits', {h: t['hits'].get(h) for h in ('expected', 'observed', 'as_planned')})
print('notes:', r['notes'])
print(r['verdict']['text'])\""
step "3a. the Locust profile through the same stack" \
  LOCUST_WORKERS=2 LOCUST_DRILL_PHASES=warmup=5,fault=10,recovery=10 \
  docker compose $F --profile load up --exit-code-from locust-master locust-master locust-worker \
  "2>&1 | grep -E 'drill phase|exited with|Aggregated|Aborting' | tail -n 8"
step "3b. the proxy's hits and refusals at its limits, from Prometheus" \
  "sleep 3; query 'sum by (service, mode) (increase(drill_fault_hits_total{compose_service=\"ledger\"}[15m]))'; query 'sum by (service) (drill_server_refused_total{compose_service=\"ledger\"}) or sum by (service) (drill_server_backlog_refused_total{compose_service=\"ledger\"})'"
step "4. down" docker compose $F --profile load down -v
