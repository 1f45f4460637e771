"""A DNS server on 127.0.0.1 that answers A queries for a few names, for tests that need one name to
resolve to several addresses (as compose DNS answers for a service with replicas) without touching
/etc/hosts. gRPC's resolver asks it directly: target `dns://127.0.0.1:PORT/NAME:GRPC_PORT`.

RFC 1035 messages over UDP, one question each: A records for the names given, an empty answer for any
other type of a known name (AAAA), NXDOMAIN for unknown names. Every question is recorded.
"""

from __future__ import annotations

import socket
import threading


class DnsStub:
    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = {name.lower().rstrip("."): list(addrs) for name, addrs in records.items()}
        self.questions: list[tuple[str, int]] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns-stub", daemon=True)

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    def target(self, name: str, port: int) -> str:
        """A gRPC target that resolves `name` through this server."""
        return f"dns://127.0.0.1:{self.port}/{name}:{port}"

    def answer(self, query: bytes) -> bytes:
        i, labels = 12, []
        while query[i]:
            labels.append(query[i + 1 : i + 1 + query[i]].decode("ascii"))
            i += 1 + query[i]
        qtype = int.from_bytes(query[i + 1 : i + 3], "big")
        question = query[12 : i + 5]
        name = ".".join(labels).lower()
        self.questions.append((name, qtype))
        known = name in self.records
        addrs = self.records.get(name, []) if qtype == 1 else []
        flags = 0x8180 | (0 if known else 3)  # response, recursion desired + available; NXDOMAIN
        header = query[:2] + flags.to_bytes(2, "big") + (1).to_bytes(2, "big") + len(addrs).to_bytes(2, "big")
        answers = b"".join(
            # a pointer to the question's name (offset 12), type A, class IN, TTL 1 s, 4 bytes
            b"\xc0\x0c" + b"\x00\x01\x00\x01" + (1).to_bytes(4, "big") + b"\x00\x04" + socket.inet_aton(a)
            for a in addrs
        )
        return header + b"\x00\x00\x00\x00" + question + answers

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                query, peer = self._sock.recvfrom(512)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                self._sock.sendto(self.answer(query), peer)
            except (IndexError, UnicodeDecodeError, OSError):
                continue  # not a query we can read: no answer, as a real server may do

    def __enter__(self) -> DnsStub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
