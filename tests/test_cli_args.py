"""Every subcommand's arguments are checked where argparse reads them: ports, counts, durations, rates, paths,
URLs. A bad one is one line `drill: …`, exit 2 (bad input), in words, before anything starts; never an internal
error, a silent default, or a flag ignored. (The companion of test_cli_errors.py, which holds its helpers.)

Where a command would start something on the code before these checks (a server that serves for ever, a drill),
the case carries a second problem that code stopped at first (a busy port, a bad `--fail-on`, `--calls 0`), so
each case fails quickly there instead of running.
"""

from __future__ import annotations

import io
import re
import sys

import pytest

from harness.core.faults import RejectReason
from harness.core.reasons import TEXT
from tests.test_cli_errors import _busy_port, assert_one_line, drill

#: what a person must never read: a Python exception's name, a reason label meant for metrics
_LABELS = [r.value for r in RejectReason if "_" in r.value]
_INTERNAL = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|\b(" + "|".join(_LABELS) + r")\b")


def assert_in_words(proc, code: int, *needles: str) -> str:
    line = assert_one_line(proc, code, *needles)
    assert not _INTERNAL.search(line), line
    return line


@pytest.fixture
def busy():
    with _busy_port() as s:
        yield str(s.getsockname()[1])


@pytest.mark.parametrize(
    "args, needles",
    [(["--port", "99999"], ["argument --port", "0-65535", "'99999'"]),  # was "internal error … OverflowError", exit 1
     (["--metrics-port", "70000"], ["--metrics-port", "-1 = any free port"]),
     (["--concurrency", "0"], ["--concurrency", "1-10000"]),  # was accepted
     (["--queue", "-1"], ["--queue", "0-100000"]),
     (["--work-ms", "inf"], ["--work-ms", "'inf'"]),
     (["--downstream-wait", "nan"], ["--downstream-wait"]),
     (["--keepalive-ms", "0"], ["--keepalive-ms"]),
     (["--seed", "1e3"], ["--seed", "64-bit"]),
     (["--shed-code", "OK"], ["--shed-code", "error status"]),
     (["--downstream", "nohostport"], ["--downstream", "HOST:PORT, dns:///NAME:PORT or @READY-FILE", "'nohostport'"]),
     (["--config", "nope"], ["unknown configuration 'nope'"]),  # a leaf may have one (its keepalive permit policy)
     (["--downstream-timeout", "2"], ["--downstream-timeout applies to downstream calls"]),
     (["--downstream", "127.0.0.1:1", "--config", "nope"], ["unknown configuration 'nope'"]),
     (["--downstream", "127.0.0.1:1", "--config", "naive", "--downstream-timeout", "2"], ["without --config"]),
     (["--orphan-work"], ["--orphan-work applies to admitted work", "--admission"]),
     (["--host", "no such host"], ["--host 'no such host' is not an address"])],
)  # fmt: skip
def test_serve_refuses_a_bad_argument_before_it_binds(busy, args, needles):
    assert_in_words(drill("serve", *args, "--port", busy) if "--port" not in args else drill("serve", *args), 2,
                    *needles)  # fmt: skip


def test_serve_refuses_a_ready_file_it_could_not_write(tmp_path, busy):
    proc = drill("serve", "--ready-file", str(tmp_path / "no" / "ready.json"), "--port", busy)
    assert_in_words(proc, 2, "--ready-file", f"no directory '{tmp_path / 'no'}'")


@pytest.mark.parametrize(
    "args, needles",
    [(["--target", "nohostport"], ["--target", "HOST:PORT", "'nohostport'"]),  # was exit 1 after 600 calls
     (["--target", "127.0.0.1:0"], ["--target", "port 1-65535"]),
     (["--spawn", "--concurrency", "0"], ["--concurrency", "1-10000"]),  # was max(1, 0)
     (["--spawn", "--directive", "explode:1"], ["--directive", "unknown mode 'explode'", "delay:MS"]),
     (["--spawn", "--directive", "abort:OK"], ["--directive", "abort:OK injects no fault"]),
     (["--spawn", "--ratio", "101"], ["--ratio", "0-100"]),
     (["--spawn", "--timeout", "inf"], ["--timeout"]),
     (["--spawn", "--cancel-ms", "-5"], ["--cancel-ms"]),
     (["--spawn", "--metrics", "nope"], ["--metrics", "http://"]),
     (["--spawn", "--seed", "x"], ["--seed"])],
)  # fmt: skip
def test_client_refuses_a_bad_argument_before_any_call(args, needles):
    assert_in_words(drill("client", *args, "--calls", "0"), 2, *needles)


def test_client_calls_out_of_range_is_a_usage_error():
    assert_in_words(drill("client", "--spawn", "--calls", "100001"), 2, "--calls", "1-100000")


@pytest.mark.parametrize(
    "args, needles",
    [(["half-open", "nohostport"], ["HOST:PORT", "'nohostport'"]),
     (["half-open", "127.0.0.1:99999"], ["HOST:PORT", "port 1-65535"]),  # was "internal error … OverflowError"
     (["half-open", "127.0.0.1:1", "--count", "0"], ["--count", "1-10000"]),
     (["half-open", "127.0.0.1:1", "--timeout", "inf"], ["--timeout"])],
)  # fmt: skip
def test_probe_refuses_a_bad_argument(args, needles):
    assert_in_words(drill("probe", *args), 2, *needles)


def test_stop_refuses_what_cannot_be_a_process_id():
    assert_in_words(drill("stop", "0"), 2, "a process id 1-4194304")
    assert_in_words(drill("stop", "99999999999"), 2, "a process id 1-4194304")  # was exit 1, "no process"


def test_dashboards_refuse_a_bad_argument(tmp_path):
    proc = drill("dashboards", "build", "--out", str(tmp_path / "f"), "--rules-out", str(tmp_path / "r"),
                 "--k8s-out", str(tmp_path / "k"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "file").write_text("x")
    proc = drill("dashboards", "build", "--out", str(tmp_path / "file"), "--rules-out", str(tmp_path / "r"),
                 "--k8s-out", str(tmp_path / "k"))  # fmt: skip
    assert_in_words(proc, 2, "--out", "exists and is not a directory")  # was "internal error: FileExistsError"
    assert_in_words(drill("dashboards", "push", "--grafana", "ftp://x"), 2, "--grafana", "http://")
    proc = drill("dashboards", "push", "--grafana", "http://127.0.0.1:9", "--dir", str(tmp_path / "none"))
    assert_in_words(proc, 2, "--dir", "no such directory")  # was: nothing to push, then "cannot reach"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.json").write_text("{")
    proc = drill("dashboards", "push", "--grafana", "http://127.0.0.1:9", "--dir", str(tmp_path / "bad"))
    assert_in_words(proc, 2, "x.json: not a dashboard's JSON")


@pytest.mark.parametrize(
    "args, needles",
    [(["--prometheus", "nope", "--last", "5m"], ["--prometheus", "http://"]),
     (["--prometheus", "http://127.0.0.1:9", "--last", "inf"], ["--last", "up to 31d"]),
     (["--prometheus", "http://127.0.0.1:9", "--start", "nan"], ["--start", "between 2000 and 2100"]),
     (["--prometheus", "http://127.0.0.1:9", "--last", "5m", "--fault-start", "1780000010", "--fault-end",
       "1780000000"], ["--fault-start must be before --fault-end"]),
     (["--series", "nope.json", "--max-error-rate", "nan"], ["--max-error-rate", "0 to 1"]),
     (["--series", "nope.json", "--max-p99", "60"], ["--max-p99", "up to 30"]),
     (["--series", "nope.json", "--hold", "0"], ["--hold", "1-3600"]),
     (["--series", "nope.json", "--window", "1e9"], ["--window"]),
     (["--series", "nope.json", "--grace", "-1"], ["--grace"]),
     (["--series", "nope.json", "--hops", "gateway,,ledger"], ["--hops", "hop names"]),
     (["--series", "nope.json", "--edge", "("], ["--edge", "not a regular expression"])],
)  # fmt: skip
def test_analyze_refuses_a_bad_argument(args, needles):
    assert_in_words(drill("analyze", *args), 2, *needles)


@pytest.mark.parametrize(
    "args, needles",
    [(["--seed", "99999999999999999999"], ["--seed", "64-bit", "9223372036854775807"]),  # a run started
     (["--trials", "101"], ["--trials", "1-100"]),
     (["--workers", "65"], ["argument --workers", "1-64"]),
     (["--grafana", "nope"], ["--grafana", "http://"]),
     (["--prometheus-sd", "/nonexistent/targets.json"], ["--prometheus-sd", "no directory"])],
)  # fmt: skip
def test_run_and_demo_refuse_a_bad_argument(args, needles):
    for command in (["run", "retry-storm"], ["demo"]):
        assert_in_words(drill(*command, *args, "--fail-on", "mttr>soon"), 2, *needles)


# --- drill hits: text in, one id a line --------------------------------------------------------------
def hits(data: bytes, *args: str):
    """`drill hits` in this process with `data` as its stdin (bytes: a binary file is what is tested)."""
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    try:
        return drill("hits", "--seed", "1", "--directive", "abort:UNAVAILABLE", *args)
    finally:
        sys.stdin = saved


def test_hits_refuses_a_binary_file_instead_of_reading_it_as_ids():
    with open("/bin/ls", "rb") as fh:
        proc = hits(fh.read())  # was: 494 "ids" and exit 0
    assert_in_words(proc, 2, "stdin line 1 is binary, not text")
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "data, needles",
    [(b"ok-1\n\xff\xfe\n", ["line 2 is not text"]),
     ("ok-1\nid-\u00e9\n".encode(), ["line 2 is not a request id", "printable ASCII"]),
     (b"a\tb\n", ["line 1 is not a request id"]),
     (b"x" * 257 + b"\n", ["257 characters", "longer than 256"])],
)  # fmt: skip
def test_hits_refuses_a_line_no_server_could_judge(data, needles):
    assert_in_words(hits(data), 2, *needles)


def test_hits_still_reads_ids_of_the_longest_kind_and_skips_blank_lines():
    proc = hits(b"\n" + b"r" * 256 + b"\r\n\nreq-61096\n")
    assert proc.returncode == 0, proc.stderr
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["r" * 256, "req-61096"]


@pytest.mark.parametrize(
    "args, needles",
    [(["--directive", "abort:OK"], ["would refuse", "abort:OK injects no fault"]),  # was "(ok_code)"
     (["--directive", "explode:1"], ["would refuse", "unknown mode 'explode'"]),  # was "(unknown_mode: explode)"
     (["--ratio", "101"], ["--ratio", "0-100"]),
     (["--attempts", "1001"], ["--attempts", "1-1000"]),
     (["--max-delay-ms", "-1"], ["--max-delay-ms"]),
     (["--seed", "1.5"], ["--seed"])],
)  # fmt: skip
def test_hits_refuses_a_bad_argument_in_words(args, needles):
    given = {"--seed": ["--seed", "1"], "--directive": ["--directive", "abort:UNAVAILABLE"]}
    defaults = [word for flag, words in given.items() if flag not in args for word in words]
    assert_in_words(drill("hits", *defaults, *args), 2, *needles)


def test_a_plan_with_a_bad_directive_says_why_in_words(tmp_path):
    from harness.drills.plan.files import PlanError, from_dict

    with pytest.raises(PlanError) as err:
        from_dict({"topology": {"hops": [{"name": "gateway"}]}, "fault": {"directive": "abort:OK"}})
    assert "fault.directive: 'abort:OK': abort:OK injects no fault" in str(err.value)
    assert not _INTERNAL.search(str(err.value)), str(err.value)


def test_every_reject_reason_has_words():
    assert set(TEXT) == set(RejectReason)
