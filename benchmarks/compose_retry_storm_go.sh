#!/usr/bin/env bash
# retry-storm-go's chain under a real Docker engine (compose/retry-storm-go.yml, docs/fleet.md), with every command,
# its output, exit code and wall time in one transcript:
#   1. `up -d --build --wait` the chain: Go leaf + drill proxy (fault), Node hop + tap, Go edge + tap
#   2. `drill run compose/retry-storm-go.stack.yaml --dry-run`, then the run (each configuration's switch recreates
#      the edge with its grpc-go service config), and what results.json says of each trial
#   3. `down -v`
# Usage, from the repository root, on committed code (the transcript names the commit):
#   bash benchmarks/compose_retry_storm_go.sh > benchmarks/results/compose-retry-storm-go-$(git rev-parse --short HEAD).txt 2>&1
# On a machine without Docker Hub, with a local stand-in of the base image under its tag:
# PYTHON_IMAGE=python:3.11.13-slim-bookworm. It removes the containers and volumes it created.
set -uo pipefail
cd "$(dirname "$0")/.."
F="-f compose/docker-compose.yml -f compose/retry-storm-go.yml"
SERVICES="rsg-leaf rsg-leaf-proxy rsg-node rsg-node-tap rsg-edge rsg-edge-tap"
OUT=out/compose-rsg

. benchmarks/_transcript.sh  # step

echo "# compose/retry-storm-go.yml under a real Docker engine: $(date -u +%FT%TZ)"
echo "# commit: $(git rev-parse --short HEAD)$(git status --porcelain -- compose harness benchmarks/compose_retry_storm_go.sh benchmarks/_transcript.sh | grep -q . && echo ' + uncommitted changes')"
echo "# $(docker version --format 'Docker Engine {{.Server.Version}}'), $(docker compose version), $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# PYTHON_IMAGE=${PYTHON_IMAGE:-(unset: the base image by digest)}"
docker compose $F down -v >/dev/null 2>&1
rm -rf "$OUT"

step "1a. the chain (the ledger builds the project's image; it is not part of the chain)" \
  RSG_CONFIG=naive docker compose $F up -d --build --wait ledger $SERVICES
step "1b. what runs" "docker compose $F ps --format '{{.Service}} {{.Image}} {{.Status}}'"
step "2a. the dry run" .venv/bin/drill run compose/retry-storm-go.stack.yaml --dry-run
step "2b. the run" .venv/bin/drill run compose/retry-storm-go.stack.yaml --out $OUT --no-live
step "2c. what results.json says of each trial" ".venv/bin/python -c \"import json; r = json.load(open('$OUT/results.json'))
for k, v in r['configs'].items():
    for t in v['trials']:
        print(k, t['trial'], 'breached', t['breached'], 'amplification by hop', t['amplification_by_hop'], 'hits', {h: t['hits'].get(h) for h in ('expected', 'observed', 'as_planned')})
print('notes:', r['notes'])
print(r['verdict']['text'])\""
step "3. down" docker compose $F down -v
