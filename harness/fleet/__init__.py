"""Services that are not Python, for drilling a fleet in any language (issue 47, contracts "Baggage").

`gohop/` (Go: grpc-go and OpenTelemetry Go from Debian's packages) and `nodehop/` (Node: grpc-js auto-instrumented
with OpenTelemetry) carry the drill only as any OpenTelemetry-instrumented service does: by W3C baggage. `build`
builds both (one step, used by the tests, the install and the runner).
"""
