"""Organic streams never feel a drill, by the bar unary calls meet (test_organic_isolation.py,
test_organic_property.py): a task or thread spawned by a stream handler serving a drill call is organic, while
the handler's own downstream calls carry the drill; sync stream handlers on a grpc.aio server run on its
executor, side by side; and random sequences of drill and organic calls of every kind leave every organic
call untouched. Real servers on 127.0.0.1, a service that is not the demo (tests/interceptors/kinds.py)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import grpc
from grpc import aio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core import headers as h
from harness.core import scope
from harness.core.faults import Kind
from harness.interceptors import DrillClientInterceptor, SyncDrillClientInterceptor, Tagging
from tests.conftest import sample_sum
from tests.interceptors import kinds as K
from tests.interceptors.test_stream_faults import wait_for


class Downstream:
    """B: a unary method that writes down the drill keys of every call it gets."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(request, context):
            self.seen.append(h.metadata_dict(context.invocation_metadata()))
            return b"b"

        return K.generic_handler({Kind.UNARY: unary})


async def _call_b_aio(port: int) -> str:
    ic = DrillClientInterceptor(Tagging())
    async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=ic.with_streams()) as ch:
        try:
            await ch.unary_unary(f"/{K.SERVICE}/Unary")(b"x", timeout=10)
            return "OK"
        except aio.AioRpcError as err:
            return err.code().name


def _call_b_sync(port: int) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as raw:
        ch = grpc.intercept_channel(raw, SyncDrillClientInterceptor(Tagging()))
        try:
            ch.unary_unary(f"/{K.SERVICE}/Unary")(b"x", timeout=10)
            return "OK"
        except grpc.RpcError as err:
            return err.code().name


class Spawning:
    """A's stream handlers. On aio, a message `later` spawns a task that calls B once the stream is over (the
    test says when: `release()`), `now` spawns one that calls B at once, while the stream is still open,
    organic by `scope.within(None, ...)`; on sync, a message `now` starts a thread that copied the context and
    calls B at once. A message `forward` calls B inline and answers B's status."""

    def __init__(self, b_port: int) -> None:
        self.b_port = b_port
        self.background: list[str] = []
        self.done = threading.Semaphore(0)
        self._go: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._go.set)

    def aio_handlers(self):
        async def background(wait: bool) -> None:
            if wait:
                await self._go.wait()
            self.background.append(await _call_b_aio(self.b_port))
            self.done.release()

        async def chat(requests, context):
            if self._go is None:
                self._loop, self._go = asyncio.get_running_loop(), asyncio.Event()
            async for request in requests:
                if request == b"forward":
                    yield (await _call_b_aio(self.b_port)).encode()
                elif request == b"later":
                    asyncio.ensure_future(background(True))
                    yield b"spawned"
                else:
                    asyncio.ensure_future(scope.within(None, background(False)))
                    yield b"spawned"

        return {Kind.BIDI_STREAMING: chat}

    def sync_handlers(self):
        def background() -> None:
            self.background.append(_call_b_sync(self.b_port))
            self.done.release()

        def upload(requests, context):
            answer = b"spawned"
            for request in requests:
                if request == b"forward":
                    answer = _call_b_sync(self.b_port).encode()
                else:
                    ctx = contextvars.copy_context()  # what a careful library does for its worker
                    threading.Thread(target=ctx.run, args=(background,), daemon=True).start()
                    assert self.done.acquire(timeout=10)  # B is called while this stream is still open
            return answer

        return {Kind.CLIENT_STREAMING: upload}


def _send(port: int, kind: Kind, messages: list[bytes], md: tuple) -> list[bytes]:
    path = f"/{K.SERVICE}/{K.NAMES[kind]}"
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        if kind is Kind.BIDI_STREAMING:
            return list(ch.stream_stream(path)(iter(messages), metadata=md, timeout=30))
        return [ch.stream_unary(path)(iter(messages), metadata=md, timeout=30)]


def test_a_task_or_thread_a_drill_stream_spawns_is_organic_its_inline_call_carries_the_drill():
    """The drill targets B; A's stream forwards it on its own calls only. On grpc.aio a spawned task that calls
    while the stream is still open needs `scope.within(None, ...)` (grpc.aio runs each client call's
    interceptors in a task no API links to the task that made the call: README, "Organic traffic is
    untouched"); once the stream is over it is organic without."""
    drill = lambda rid: K.drill_md("abort:INTERNAL", rid, x_fault_target="iso-stream-b")  # noqa: E731
    b = Downstream()
    with K.server("aio", K.settings("iso-stream-b"), handler=b.handler()) as (b_port, _):
        got = {}
        for flavour, kind, spawns in (("aio", Kind.BIDI_STREAMING, [b"later", b"now"]),
                                      ("sync", Kind.CLIENT_STREAMING, [b"now"])):  # fmt: skip
            a = Spawning(b_port)
            handlers = a.aio_handlers() if flavour == "aio" else a.sync_handlers()
            with K.server(flavour, K.settings(f"iso-stream-a-{flavour}"), handler=K.generic_handler(handlers)) as (
                a_port, _,
            ):  # fmt: skip
                spawned = _send(a_port, kind, spawns, drill(f"spawn-{flavour}"))
                if flavour == "aio":
                    assert a.done.acquire(timeout=10)  # `now` called B while the stream was open
                    a.release()  # the stream is over: `later` calls B now
                    assert a.done.acquire(timeout=10)
                inline = _send(a_port, kind, [b"forward"], drill(f"inline-{flavour}"))
            got[flavour] = (spawned, a.background, inline)
    assert got == {
        "aio": ([b"spawned", b"spawned"], ["OK", "OK"], [b"INTERNAL"]),
        "sync": ([b"spawned"], ["OK"], [b"INTERNAL"]),
    }
    background = [md for md in b.seen if md.get(h.FAULT) is None]
    assert len(background) == 3 and not any(h.TENANT in md for md in background)


def test_sync_stream_handlers_on_an_aio_server_run_on_its_executor_side_by_side():
    """Three sync client-streaming and three bidi handlers meet at a barrier: they pass only if all three run at
    once (on the loop, one at a time, the first would wait for the others for ever)."""
    answers: set[str] = set()
    seen_threads: list[str] = []
    barriers = {kind: threading.Barrier(3, timeout=20) for kind in (Kind.CLIENT_STREAMING, Kind.BIDI_STREAMING)}

    def upload(requests, context):
        n = sum(1 for _ in requests)
        seen_threads.append(threading.current_thread().name)
        barriers[Kind.CLIENT_STREAMING].wait()
        return str(n).encode()

    def chat(requests, context):
        for request in requests:
            seen_threads.append(threading.current_thread().name)
            barriers[Kind.BIDI_STREAMING].wait()
            yield request

    handler = K.generic_handler({Kind.CLIENT_STREAMING: upload, Kind.BIDI_STREAMING: chat})
    with K.server("aio", K.settings("sync-streams-on-aio"), handler=handler) as (port, _):
        for kind in barriers:
            def one(k=kind, i=0) -> None:
                answers.add(repr(_send(port, k, [b"m"], K.drill_md(None, f"{k.value}-{i}"))))

            threads = [threading.Thread(target=one, kwargs={"i": i}, daemon=True) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
    assert answers == {"[b'1']", "[b'm']"}  # every call answered (a broken barrier would fail them)
    assert len(seen_threads) == 6 and "MainThread" not in seen_threads


# --- property: random sequences of drill and organic calls of every kind ----------------------------
_op = st.tuples(
    st.sampled_from(["organic", "drill"]),
    st.sampled_from(K.KINDS),
    st.sampled_from([
        "delay:20", "abort:INTERNAL", "drop:20", "abort:UNAVAILABLE@after=1", "delay:10@after=2",
        "abort:UNAVAILABLE@read=1", "drop:20@read=2@headers=sent", "abort:UNAVAILABLE@headers=sent",
    ]),  # fmt: skip
    st.sampled_from([None, "50", "100"]),
    st.sampled_from(["aio", "sync"]),
)


def test_no_organic_stream_ever_feels_a_drill():
    import contextlib

    with contextlib.ExitStack() as stack:
        ports = {f: stack.enter_context(K.server(f, K.settings(f"prop-stream-{f}")))[0] for f in ("aio", "sync")}
        channels = {f: stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{p}")) for f, p in ports.items()}
        counted = {(f, t): 0 for f in ports for t in ("organic", "drill")}

        @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(_op, min_size=1, max_size=8))
        def check(ops):
            for kind_of_call, kind, directive, ratio, flavour in ops:
                ch = channels[flavour]
                if kind_of_call == "drill":
                    extra = {} if ratio is None else {"x_fault_ratio": ratio}
                    K.call(ch, kind, K.drill_md(directive, f"p-{id(ops)}", **extra), n=3, timeout=5)
                    counted[(flavour, "drill")] += 1
                    continue
                seen = K.call(ch, kind, (), n=3, timeout=30)
                expected = 3 if kind.response_streaming else 1
                assert (seen.code, seen.marker, seen.count) == ("OK", None, expected), (flavour, kind, seen.details)
                counted[(flavour, "organic")] += 1

        check()
        for (flavour, traffic), n in counted.items():
            assert wait_for(lambda f=flavour, t=traffic, n=n: sample_sum(
                "drill_server_calls_total", service=f"prop-stream-{f}", traffic=t) == n)  # fmt: skip
            if traffic == "organic":
                assert sample_sum("drill_server_calls_total", service=f"prop-stream-{flavour}", traffic="organic",
                                  fault_mode="none") == n  # fmt: skip
