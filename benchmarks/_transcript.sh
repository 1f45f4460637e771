# Sourced by the compose transcripts (compose_e2e.sh, compose_go.sh): how each step is printed, and PromQL asked.

step() {  # step "what" cmd...: print the command, run it, print its exit code and wall time
  echo
  echo "### $1"
  shift
  echo "\$ $*"
  local t0 rc
  t0=$(date +%s.%N)
  bash -c "set -o pipefail; $*" 2>&1 | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/\r//g'
  rc=${PIPESTATUS[0]}
  printf '[exit %s, %.1f s]\n' "$rc" "$(echo "$(date +%s.%N) - $t0" | bc)"
}

query() {  # query PROMQL: one line per series, labels and value, from the stack's Prometheus on :9090
  .venv/bin/python - "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[1]})
for s in json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]:
    print(" ".join(f"{k}={v}" for k, v in sorted(s["metric"].items())), "=>", s["value"][1])
PY
}
export -f query
