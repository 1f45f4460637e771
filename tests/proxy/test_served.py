"""`@served` at `drill proxy` in front of the Go probe (grpc-go): the call is forwarded, the service does its work
and answers, and the caller gets the fault instead, so the fault costs the service what a real failure costs it.

The proof of the work is the service's own record (`Seen`: what the Go process itself noted of each call), never the
proxy's: a served call's record is whole, a plain abort's is empty (the proxy answered it alone).
"""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from harness.core import headers as h
from harness.core.faults import is_hit
from tests.conftest import drill_process
from tests.proxy.probe import SERVICE
from tests.proxy.test_forward import behind_proxy, probe, service  # noqa: F401 - fixtures

SEED = 7
N = 3
#: what the probe notes of a call of each method it handled to the end, and how many messages the caller gets
#: before a served fault (a response stream's all: Chat echoes each message, then one after the half-close)
KINDS = {
    "Echo": (["answered"], 0),
    "Count": (["message"] * N + ["end"], 0),
    "Repeat": (["wrote"] * N + ["done"], N),
    "Chat": (["message"] * N + ["end"], N + 1),
}


def _md(directive: str, rid: str, **extra: str) -> tuple:
    return ((h.TENANT, "tenant-drill"), (h.FAULT, directive), (h.FAULT_TARGET, "probe"), (h.REQUEST_ID, rid),
            *((k.replace("_", "-"), v) for k, v in extra.items()))  # fmt: skip


def _call(address: str, msg, method: str, rid: str, md: tuple, mode: str = "", timeout: float = 10,
          options=()) -> dict:  # fmt: skip
    """One call of `method` (N messages where it streams) from a sync client: its status, details, marker, trailers,
    message count, and the service's record of it. (Not grpc.aio's client: it reads a request-streaming call that
    the server ended before reading it as INTERNAL "Internal error from Core" most of the time, whatever status the
    server sent, in process as through the proxy.)"""
    path = SERVICE + method
    out = {"code": "OK", "details": "", "count": 0, "start": time.monotonic()}
    requests = [msg(id=rid, count=N, mode=mode).SerializeToString() for _ in range(N)]
    with grpc.insecure_channel(address, options=options) as channel:
        trailers = ()
        try:
            if method == "Echo":
                _, call = channel.unary_unary(path).with_call(requests[0], metadata=md, timeout=timeout)
            elif method == "Count":
                _, call = channel.stream_unary(path).with_call(iter(requests), metadata=md, timeout=timeout)
            else:
                if method == "Repeat":
                    call = channel.unary_stream(path)(requests[0], metadata=md, timeout=timeout)
                else:
                    call = channel.stream_stream(path)(iter(requests), metadata=md, timeout=timeout)
                for _ in call:
                    out["count"] += 1
            trailers = call.trailing_metadata()
        except grpc.RpcError as err:
            out["code"], out["details"] = err.code().name, err.details() or ""
            trailers = err.trailing_metadata()
        out["end"] = time.monotonic()
        out["trailers"] = dict(trailers or ())
        out["marker"] = out["trailers"].get(h.FAULT_MARKER)
        reply = channel.unary_unary(SERVICE + "Seen")(msg(id=rid).SerializeToString(), timeout=5)
        out["record"] = json.loads(msg.FromString(reply).body or b"null") or []
    return out


def _calls(service, probe, calls, **settings) -> list[dict]:  # noqa: F811
    """Each `(method, rid, md, mode...)` of `calls`, in order, through a proxy in front of the probe."""
    msg = probe[2]

    async def body(address: str):
        return await asyncio.to_thread(lambda: [_call(address, msg, *c) for c in calls])

    return behind_proxy(service, probe, body, enabled=True, seed=SEED, **settings)


@pytest.mark.parametrize("table", ["descriptors", "none"])
@pytest.mark.parametrize("method", list(KINDS))
def test_at_served_the_service_handles_the_call_and_the_caller_gets_the_fault(service, probe, method,  # noqa: F811
                                                                              table):  # fmt: skip
    """With the methods' kinds, and without (every call forwarded as a stream: a single response then goes out
    before the fault, and the caller's gRPC library still reports the fault's status, not the response)."""
    record, messages = KINDS[method]
    plain, served, drop = _calls(service, probe, [
        (method, f"plain-{method}-{table}", _md("abort:UNAVAILABLE", f"plain-{method}-{table}")),
        (method, f"served-{method}-{table}", _md("abort:UNAVAILABLE@served", f"served-{method}-{table}")),
        (method, f"drop-{method}-{table}", _md("drop:200@served", f"drop-{method}-{table}")),
    ], table=table)  # fmt: skip
    assert (plain["code"], plain["marker"], plain["record"]) == ("UNAVAILABLE", "abort", [])  # never forwarded
    assert (served["code"], served["details"], served["marker"]) == ("UNAVAILABLE", "injected fault: UNAVAILABLE",
                                                                     "abort")  # fmt: skip
    assert (served["record"], served["count"]) == (record, messages)
    assert (drop["code"], drop["details"], drop["marker"]) == ("UNAVAILABLE", "injected drop", "drop")
    assert (drop["record"], drop["count"]) == (record, messages)
    assert drop["end"] - drop["start"] >= 0.2  # the silence follows the work, which began after the call did


def test_the_services_own_failure_is_replaced_and_its_trailers_kept(service, probe):  # noqa: F811
    """The probe answers FAILED_PRECONDITION with a trailer: under `@served` the caller gets the injected status with
    the service's trailer and the marker; with no fault, the service's own failure passes exactly."""
    served, alone = _calls(service, probe, [
        ("Echo", "fail-1", _md("abort:RESOURCE_EXHAUSTED@served", "fail-1"), "fail"),
        ("Echo", "fail-2", (), "fail"),
    ])  # fmt: skip
    assert (served["code"], served["marker"], served["record"]) == ("RESOURCE_EXHAUSTED", "abort", ["failed"])
    assert served["trailers"]["x-probe-trailer"] == "t-fail-1"
    assert (alone["code"], alone["details"], alone["marker"]) == ("FAILED_PRECONDITION", "probe failed fail-2", None)
    assert alone["trailers"]["x-probe-trailer"] == "t-fail-2"


def test_served_hits_through_the_proxy_are_the_ids_drill_hits_predicts_and_all_did_the_work(service, probe,  # noqa: F811
                                                                                            caplog):  # fmt: skip
    caplog.set_level("INFO", logger="drill.audit")
    raw = "abort:UNAVAILABLE@served"
    ids = [f"ph-{i * 2654435761 % 1000003}" for i in range(30)]
    got = _calls(service, probe, [("Echo", rid, _md(raw, rid, x_fault_ratio="50")) for rid in ids])
    out = dict(zip(ids, got, strict=True))
    faulted = {rid for rid, o in out.items() if (o["code"], o["marker"]) == ("UNAVAILABLE", "abort")}
    assert {rid for rid, o in out.items() if (o["code"], o["marker"]) == ("OK", None)} == set(ids) - faulted
    assert all(o["record"] == ["answered"] for o in out.values())  # the service handled every call, hit or not
    audited = set()
    for r in caplog.records:
        line = json.loads(r.getMessage()) if '"event":"fault_hit"' in r.getMessage() else {}
        if line.get("request_id") in out and line.get("options") == "served" and line.get("service") == "probe":
            audited.add(line["request_id"])
    hits = drill_process("hits", "--seed", str(SEED), "--directive", raw, "--ratio", "50", stdin="\n".join(ids))
    assert hits.returncode == 0, hits.stderr
    predicted = {line.split("\t")[0] for line in hits.stdout.splitlines() if line.endswith("\thit")}
    assert predicted == faulted == audited == {rid for rid in ids if is_hit(SEED, rid, raw, 50)}
    assert 0 < len(faulted) < len(ids)


def test_a_served_drop_past_the_callers_deadline_is_its_deadline_after_the_work(service, probe):  # noqa: F811
    (got,) = _calls(service, probe, [("Echo", "dl-1", _md("drop:5000@served", "dl-1"), "", 0.5)])
    assert (got["code"], got["record"]) == ("DEADLINE_EXCEEDED", ["answered"])


#: gRPC's own retry policy (gRFC A6): up to 4 attempts on UNAVAILABLE, quickly.
RETRY = (("grpc.enable_retries", 1), ("grpc.service_config", json.dumps({"methodConfig": [{
    "name": [{"service": "probe.v1.Probe"}], "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s",
    "maxBackoff": "0.05s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})))  # fmt: skip


def test_through_the_proxy_each_retry_of_a_served_abort_is_work_the_service_does_again(service, probe):  # noqa: F811
    """The probe's Echo sends its headers before its answer, and the proxy relays them as they come: an `@served`
    fault holds them and drops them when it ends the call, so a retry policy retries it (trailers-only) and the
    service handles every attempt; `@headers=sent` commits the call (one attempt); a plain abort never reaches it."""
    plain, served, headers = _calls(service, probe, [
        ("Echo", "r-plain", _md("abort:UNAVAILABLE", "r-plain"), "", 10, RETRY),
        ("Echo", "r-served", _md("abort:UNAVAILABLE@served", "r-served"), "", 10, RETRY),
        ("Echo", "r-headers", _md("abort:UNAVAILABLE@served@headers=sent", "r-headers"), "", 10, RETRY),
    ])  # fmt: skip
    assert [c["code"] for c in (plain, served, headers)] == ["UNAVAILABLE"] * 3
    assert (plain["record"], served["record"], headers["record"]) == ([], ["answered"] * 4, ["answered"])
