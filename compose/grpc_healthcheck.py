"""Container healthcheck: standard gRPC health Check on HOST:PORT; exit 0 only when SERVING.

    python /app/compose/grpc_healthcheck.py 127.0.0.1:50051 [SERVICE]
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str]) -> int:
    target = argv[1] if len(argv) > 1 else "127.0.0.1:50051"
    service = argv[2] if len(argv) > 2 else ""
    try:
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2.0
            )
    except grpc.RpcError as err:
        print(f"{target}: {err.code().name} {err.details()}", file=sys.stderr)
        return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print(f"{target}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
