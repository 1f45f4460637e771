#!/usr/bin/env bash
# The blackhole drill in the compose stack (compose/blackhole.yml: two ledger replicas, the second behind a running
# `drill link`), under a real Docker engine, as docs/link-drills.md tells it, with every command, its output, exit
# code and wall time in one transcript:
#   1. `up -d --build --wait` the account, both ledgers, the link and Prometheus; the link as its API lists it
#   2. `drill run compose/stack-blackhole.yaml --dry-run`, then one trial of each configuration (the runner sets the
#      blackhole through the link's admin API at each fault's start and removes it at its end), and what
#      results.json says of each trial
#   3. the link's own counters in Prometheus (connections it accepted, connections the toxic acted on), and its API
#      after the run (no toxic left)
#   4. `down -v`
# Usage, from the repository root, on committed code (the transcript names the commit):
#   bash benchmarks/compose_blackhole.sh > benchmarks/results/compose-blackhole-$(git rev-parse --short HEAD).txt 2>&1
# Services are named (Grafana and Jaeger left out), so a machine without Docker Hub runs it on local stand-in images
# of the two base images (PYTHON_IMAGE=python:3.11.13-slim-bookworm to build on the stand-in's tag). It removes the
# containers, network and volumes it created.
set -uo pipefail
cd "$(dirname "$0")/.."
F="-f compose/docker-compose.yml -f compose/blackhole.yml"
OUT=out/compose-blackhole

. benchmarks/_transcript.sh  # step, query

echo "# compose/blackhole.yml under a real Docker engine: $(date -u +%FT%TZ)"
echo "# commit: $(git rev-parse --short HEAD)$(git status --porcelain -- compose harness benchmarks/compose_blackhole.sh benchmarks/_transcript.sh | grep -q . && echo ' + uncommitted changes')"
echo "# $(docker version --format 'Docker Engine {{.Server.Version}}'), $(docker compose version), $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# PYTHON_IMAGE=${PYTHON_IMAGE:-(unset: the base image by digest)}"
docker compose $F down -v >/dev/null 2>&1
rm -rf "$OUT"

step "1a. the account, two ledgers, the link in front of ledger-1, Prometheus" \
  docker compose $F up -d --build --wait account ledger ledger-1 link-ledger-1 prometheus
step "1b. what runs" "docker compose $F ps --format '{{.Service}} {{.Image}} {{.Status}}'"
step "1c. the link as it started, and as its admin API (Toxiproxy's) lists it" \
  "docker compose $F logs --no-log-prefix link-ledger-1 | grep -m1 'link on'; curl -s http://127.0.0.1:8474/proxies; echo"
step "2a. the dry run" .venv/bin/drill run compose/stack-blackhole.yaml --dry-run
step "2b. one trial of each configuration" .venv/bin/drill run compose/stack-blackhole.yaml --no-live --out $OUT
step "2c. what results.json says of each trial" ".venv/bin/python -c \"import json; r = json.load(open('$OUT/results.json'))
for k, v in r['configs'].items():
    for t in v['trials']:
        print(k, t['trial'], 'success_rate', t.get('success_rate'), 'error_rate_during_fault', t.get('error_rate_during_fault'), 'ttr_s', t.get('ttr_s'), 'link', t.get('link'))
print('ranking:', r.get('ranking'))
print(r['verdict']['text'])\""
step "3a. the link's counters, from Prometheus (its /metrics, scraped as compose_service=ledger)" \
  "sleep 2; query 'sum by (link) (drill_link_connections_total)'; query 'sum by (link, toxic) (drill_link_connections_faulted_total)'"
step "3b. no toxic left on the link" "curl -s http://127.0.0.1:8474/proxies/ledger-1/toxics; echo"
step "4. down" docker compose $F down -v
