#!/usr/bin/env sh
# (Re)start `kubectl port-forward` to the drill gateway, in the background, and return at once.
# A rollout replaces the gateway pod and ends the port-forward that pointed at it, so the switch
# commands of deploy/k8s/stack.yaml call this after each rollout; the stack's ready probe then
# waits until the gateway answers through the new forward. Stops only the forward it started
# before (by the PID it saved, checked to still be that port-forward).
#   deploy/k8s/forward-gateway.sh            # 127.0.0.1:50051 -> svc/gateway:50051 in namespace drill
set -eu
port="${DRILL_EDGE_PORT:-50051}"
state="${TMPDIR:-/tmp}/drill-k8s-gateway-forward"
if [ -f "$state.pid" ]; then
  old="$(cat "$state.pid")"
  # -ww: full arguments whatever $COLUMNS says (ps cuts `args` to it, and the match would miss)
  if ps -ww -p "$old" -o args= 2>/dev/null | grep -q "port-forward svc/gateway"; then
    kill "$old" 2>/dev/null || true
    # until it is gone or only a zombie (a PID 1 that does not reap keeps it), at most 10 s
    i=0
    while [ "$i" -lt 100 ] && ps -p "$old" -o stat= 2>/dev/null | grep -qv Z; do sleep 0.1; i=$((i + 1)); done
  fi
fi
# In a session of its own, the forward outlives the switch command (and its process group).
forward="kubectl -n drill port-forward svc/gateway --address 127.0.0.1 $port:50051"
if command -v setsid >/dev/null 2>&1; then
  setsid $forward >"$state.log" 2>&1 </dev/null &
else  # macOS has no setsid(1)
  perl -MPOSIX=setsid -e 'setsid(); exec @ARGV or die "$ARGV[0]: $!"' $forward >"$state.log" 2>&1 </dev/null &
fi
echo $! >"$state.pid"
