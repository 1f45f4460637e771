"""Container healthcheck: exit 0 when HOST:PORT accepts a TCP connection, 1 otherwise (2 s at most).

    python3 -I -S /app/compose/port_probe.py 127.0.0.1:9646

The Locust master's: it serves its /metrics port once its options and target method were checked, so a
master that fails at start never passes it. Standard library only, run with `-I -S` like
grpc_health_probe.py: an interpreter start and one connect.
"""

import _socket
import sys


def main(argv: list[str]) -> int:
    host, _, port = argv[1].rpartition(":")
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    sock.settimeout(2.0)
    try:
        sock.connect((host, int(port)))
    except OSError:
        return 1
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
