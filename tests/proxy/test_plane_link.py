"""drill proxy's pass-through and fault tests (tests/proxy/test_forward.py, test_served.py) run again with the link as
its data plane (`harness.link.plane.start_plane`, what `drill proxy --plane link` runs) in place of grpc.aio's.

The tests themselves are not copied: each is called as written, with the proxy its helper (`behind_proxy`) starts
swapped for a link-plane one. Those that start `drill proxy` as a process take a `plane` parameter where they are;
what runs on the aio plane only, and why, is in docs/proxy.md ("Data planes").
"""

from __future__ import annotations

import inspect

import pytest

from harness.link.plane import start_plane
from tests.proxy import test_forward as tf
from tests.proxy import test_served as ts
from tests.proxy.test_forward import probe, service  # noqa: F401 - fixtures


class _Plane:
    """What `start_proxy` returns, (server, port, channel), for a link plane: `stop` and `close` end it."""

    def __init__(self, links) -> None:
        self.links = links

    async def stop(self, grace) -> None:
        await self.links.close()

    async def close(self) -> None:
        pass


async def _start_link(upstream, *, settings, method_kinds=None, **_):
    links, port = await start_plane(upstream, settings=settings, method_kinds=method_kinds)
    plane = _Plane(links)
    return plane, port, plane


#: (module, test, its pytest parameters) run on the link plane
CASES = [
    (tf, "test_unary_bytes_metadata_headers_and_trailers_pass_exactly", {}),
    (tf, "test_a_failure_before_the_first_message_keeps_its_headers_status_details_and_trailers", {}),
    (tf, "test_the_callers_deadline_reaches_the_service_as_the_time_it_has_left", {}),
    (tf, "test_a_cancelled_client_stream_reaches_the_service_as_a_cancel_never_as_its_end", {}),
    (tf, "test_a_half_closed_bidi_stream_keeps_receiving_until_the_service_ends_it", {}),
    (tf, "test_server_streams_and_unknown_kinds_pass_as_streams", {}),
    (tf, "test_a_service_that_is_down_is_unavailable_at_once_and_served_again_when_back", {}),
    (tf, "test_drill_calls_are_faulted_by_the_same_pipeline_and_organic_ones_pass", {}),
    (tf, "test_a_mid_stream_fault_lands_after_n_messages_and_the_wrong_kind_is_refused", {}),
    (tf, "test_a_slow_reader_slows_the_service_through_the_proxy", {}),
    (tf, "test_with_a_drill_secret_only_signed_directives_inject_and_a_named_authority_still_goes_upstream", {}),
    *[(ts, "test_at_served_the_service_handles_the_call_and_the_caller_gets_the_fault", {"method": m, "table": t})
      for m in ts.KINDS for t in ("descriptors", "none")],  # fmt: skip
    (ts, "test_the_services_own_failure_is_replaced_and_its_trailers_kept", {}),
    (ts, "test_served_hits_through_the_proxy_are_the_ids_drill_hits_predicts_and_all_did_the_work", {}),
    (ts, "test_a_served_drop_past_the_callers_deadline_is_its_deadline_after_the_work", {}),
    (ts, "test_through_the_proxy_each_retry_of_a_served_abort_is_work_the_service_does_again", {}),
]


def _id(case) -> str:
    _, name, params = case.values if hasattr(case, "values") else case
    return f"{name}[{','.join(map(str, params.values()))}]" if params else name


@pytest.mark.parametrize(("module", "name", "params"), CASES,
                         ids=[_id(c) for c in CASES])  # fmt: skip
def test_on_the_link_plane(module, name, params, request, monkeypatch):
    monkeypatch.setattr(tf, "start_proxy", _start_link)
    test = getattr(module, name)
    kwargs = {}
    for arg in inspect.signature(test).parameters:
        kwargs[arg] = params[arg] if arg in params else request.getfixturevalue(arg)
    test(**kwargs)
