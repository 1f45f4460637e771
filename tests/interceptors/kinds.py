"""A service that is not the demo, with all four kinds of method, for the stream-fault tests.

`kinds.v1.Kinds` is registered with `grpc.method_handlers_generic_handler` and bytes on the
wire (no proto): `Unary`, `Watch` (server-streaming: the request is the number of messages),
`Upload` (client-streaming: the response is how many messages it read) and `Chat` (bidi: one
echo per request message). Each message a handler sends is `INDEX:MONOTONIC` (when the
handler produced it) and every handler writes down when it started, read each message and
ended, on the monotonic clock the test process shares with its servers, so a test measures a
fault's wait where the method guarantees it (a lower bound), not through the client's timing.

Three server flavours: `aio` (coroutine and async-generator handlers on grpc.aio), `aio-sync`
(plain functions and generators on grpc.aio, run on its executor), `sync` (grpc's thread
pool); and `aio-rw`, coroutine handlers that use `context.read()`/`context.write()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent import futures

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core.faults import Kind
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.interceptors import FaultServerInterceptor, SyncFaultServerInterceptor

SERVICE = "kinds.v1.Kinds"
NAMES = {
    Kind.UNARY: "Unary",
    Kind.SERVER_STREAMING: "Watch",
    Kind.CLIENT_STREAMING: "Upload",
    Kind.BIDI_STREAMING: "Chat",
}
KINDS = tuple(NAMES)
FLAVOURS = ("aio", "aio-sync", "sync")
SEED = 11


def method(kind: Kind) -> str:
    """The metric label of a kind's method (`pkg.Service/Method`)."""
    return f"{SERVICE}/{NAMES[kind]}"


def settings(service: str, **kw) -> FaultSettings:
    return FaultSettings(enabled=True, seed=SEED, service=service, instance_id=f"{service}-0", **kw)


def message(i: int) -> bytes:
    return f"{i}:{time.monotonic():.6f}".encode()


def stamp(data: bytes) -> float:
    """When the handler produced a message (monotonic)."""
    return float(data.split(b":")[1])


class Log:
    """What the handlers did, for the test to read: runs, and per call its events on the monotonic clock."""

    def __init__(self) -> None:
        self.runs = 0
        self.events: list[tuple[str, str, float]] = []  # (request id, event, monotonic time)
        self._lock = threading.Lock()

    def note(self, context, event: str) -> None:
        rid = dict(context.invocation_metadata()).get(h.REQUEST_ID, "")
        with self._lock:
            if event == "start":
                self.runs += 1
            self.events.append((rid, event, time.monotonic()))

    def times(self, rid: str, event: str) -> list[float]:
        with self._lock:
            return [t for r, e, t in self.events if r == rid and e == event]


# --- handlers ------------------------------------------------------------------------------------
def aio_handlers(log: Log, rw: bool = False) -> dict[Kind, object]:
    async def unary(request, context):
        log.note(context, "start")
        log.note(context, "end")
        return b"u:" + request

    async def watch(request, context):
        log.note(context, "start")
        for i in range(int(request or b"5")):
            yield message(i)
        log.note(context, "end")

    async def upload(requests, context):
        log.note(context, "start")
        n = 0
        async for _ in requests:
            log.note(context, "read")
            n += 1
        log.note(context, "end")
        return str(n).encode()

    async def chat(requests, context):
        log.note(context, "start")
        i = 0
        async for _ in requests:
            log.note(context, "read")
            yield message(i)
            i += 1
        log.note(context, "end")

    async def upload_rw(requests, context):
        log.note(context, "start")
        n = 0
        while (await context.read()) is not aio.EOF:
            log.note(context, "read")
            n += 1
        log.note(context, "end")
        return str(n).encode()

    async def watch_rw(request, context):
        log.note(context, "start")
        for i in range(int(request or b"5")):
            await context.write(message(i))
        log.note(context, "end")

    async def chat_rw(requests, context):
        log.note(context, "start")
        i = 0
        while (await context.read()) is not aio.EOF:
            log.note(context, "read")
            await context.write(message(i))
            i += 1
        log.note(context, "end")

    if rw:
        return {Kind.UNARY: unary, Kind.SERVER_STREAMING: watch_rw, Kind.CLIENT_STREAMING: upload_rw,
                Kind.BIDI_STREAMING: chat_rw}  # fmt: skip
    return {Kind.UNARY: unary, Kind.SERVER_STREAMING: watch, Kind.CLIENT_STREAMING: upload, Kind.BIDI_STREAMING: chat}


def sync_handlers(log: Log) -> dict[Kind, object]:
    def unary(request, context):
        log.note(context, "start")
        log.note(context, "end")
        return b"u:" + request

    def watch(request, context):
        log.note(context, "start")
        for i in range(int(request or b"5")):
            yield message(i)
        log.note(context, "end")

    def upload(requests, context):
        log.note(context, "start")
        n = 0
        for _ in requests:
            log.note(context, "read")
            n += 1
        log.note(context, "end")
        return str(n).encode()

    def chat(requests, context):
        log.note(context, "start")
        for i, _ in enumerate(requests):
            log.note(context, "read")
            yield message(i)
        log.note(context, "end")

    return {Kind.UNARY: unary, Kind.SERVER_STREAMING: watch, Kind.CLIENT_STREAMING: upload, Kind.BIDI_STREAMING: chat}


_CONSTRUCTORS = {
    Kind.UNARY: grpc.unary_unary_rpc_method_handler,
    Kind.SERVER_STREAMING: grpc.unary_stream_rpc_method_handler,
    Kind.CLIENT_STREAMING: grpc.stream_unary_rpc_method_handler,
    Kind.BIDI_STREAMING: grpc.stream_stream_rpc_method_handler,
}


def generic_handler(handlers: dict[Kind, object]) -> grpc.GenericRpcHandler:
    """The four methods, bytes in and out (no (de)serializer: grpc passes bytes through)."""
    return grpc.method_handlers_generic_handler(
        SERVICE, {NAMES[kind]: _CONSTRUCTORS[kind](fn) for kind, fn in handlers.items()}
    )


# --- servers -------------------------------------------------------------------------------------
@contextlib.contextmanager
def server(flavour: str, s: FaultSettings, *, stop: EmergencyStop | None = None, tracer=None, handler=None):
    """A real server of `flavour` on 127.0.0.1 with the fault interceptor (aio ones on a loop thread of their own).
    Yields (port, log). `handler`: a generic handler of the test's own instead of the four methods."""
    log = Log()
    if flavour == "sync":
        srv = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32),
            interceptors=[SyncFaultServerInterceptor(s, metrics=True, tracer=tracer, stop=stop)],
        )
        srv.add_generic_rpc_handlers((handler or generic_handler(sync_handlers(log)),))
        port = srv.add_insecure_port("127.0.0.1:0")
        srv.start()
        try:
            yield port, log
        finally:
            srv.stop(0)
        return
    handlers = sync_handlers(log) if flavour == "aio-sync" else aio_handlers(log, rw=flavour == "aio-rw")
    loop = asyncio.new_event_loop()
    box: dict = {}
    started = threading.Event()

    async def main() -> None:
        srv = aio.server(interceptors=[FaultServerInterceptor(s, metrics=True, tracer=tracer, stop=stop)])
        srv.add_generic_rpc_handlers((handler or generic_handler(handlers),))
        box["port"] = srv.add_insecure_port("127.0.0.1:0")
        await srv.start()
        box["halt"] = asyncio.Event()
        started.set()
        await box["halt"].wait()
        await srv.stop(0)
        # calls grpc did not end (a caller still there at the stop) are tasks nobody would resume once this loop
        # ends: end them here, not in some later garbage collection on another test's thread
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=5)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield box["port"], log
    finally:
        loop.call_soon_threadsafe(box["halt"].set)
        thread.join(10)
        loop.close()


# --- a plain client (no harness interceptor): what a caller sees ---------------------------------
class Seen:
    """What the caller saw: status, the marker, messages with their arrival times, the call's start and end."""

    def __init__(self) -> None:
        self.code = "OK"
        self.details = ""
        self.marker: str | None = None
        self.messages: list[bytes] = []
        self.arrived: list[float] = []
        self.start = self.end = 0.0

    @property
    def count(self) -> int:
        return len(self.messages)


@contextlib.contextmanager
def servers(prefix: str, flavours: tuple[str, ...]):
    """One server per flavour, each under its own service name `PREFIX-FLAVOUR`: {flavour: (port, log, service)}
    (a module's servers, shared by its tests)."""
    with contextlib.ExitStack() as stack:
        out = {}
        for flavour in flavours:
            service = f"{prefix}-{flavour}"
            port, log = stack.enter_context(server(flavour, settings(service)))
            out[flavour] = (port, log, service)
        yield out


def drill_md(directive: str | None, rid: str, **extra: str) -> tuple:
    md = [(h.TENANT, "tenant-drill"), (h.REQUEST_ID, rid)]
    if directive:
        md.append((h.FAULT, directive))
    md += [(k.replace("_", "-"), v) for k, v in extra.items()]
    return tuple(md)


def call(channel: grpc.Channel, kind: Kind, md: tuple = (), n: int = 5, timeout: float = 30.0, gap_s: float = 0.0):
    """One call of `kind` with `n` messages (the stream's length, or requests sent); returns `Seen`."""
    seen = Seen()
    path = f"/{SERVICE}/{NAMES[kind]}"

    def requests():
        for i in range(n):
            if gap_s and i:
                time.sleep(gap_s)
            yield message(i)

    seen.start = time.monotonic()
    trailing = ()
    try:
        if kind is Kind.UNARY:
            reply, c = channel.unary_unary(path).with_call(b"x", metadata=md, timeout=timeout)
            seen.messages.append(reply)
            seen.arrived.append(time.monotonic())
            trailing = c.trailing_metadata()
        elif kind is Kind.CLIENT_STREAMING:
            reply, c = channel.stream_unary(path).with_call(requests(), metadata=md, timeout=timeout)
            seen.messages.append(reply)
            seen.arrived.append(time.monotonic())
            trailing = c.trailing_metadata()
        else:
            if kind is Kind.SERVER_STREAMING:
                c = channel.unary_stream(path)(str(n).encode(), metadata=md, timeout=timeout)
            else:
                c = channel.stream_stream(path)(requests(), metadata=md, timeout=timeout)
            for item in c:
                seen.messages.append(item)
                seen.arrived.append(time.monotonic())
            trailing = c.trailing_metadata()
    except grpc.RpcError as err:
        seen.code, seen.details = err.code().name, err.details() or ""
        trailing = err.trailing_metadata()
    seen.end = time.monotonic()
    marks = [v for k, v in (trailing or ()) if k == h.FAULT_MARKER]
    seen.marker = marks[0] if marks else None
    return seen
