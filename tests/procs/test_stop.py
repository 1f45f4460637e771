"""`stop_processes` (harness.procs.spawn) ends a child's whole process group, not only the child it started.

The case that matters: a shell (`sh -c "cd … && program"`, how `stack.processes` runs a command) whose program is
the shell's child. SIGTERM ends the shell at once; its program may drain first. The program must get the grace
too, and once `stop_processes` returns nothing of the group may run (it would hold its port and its folder).
"""

from __future__ import annotations

import pathlib
import sys
import time

from harness.procs.spawn import group_members, spawn, stop_processes

#: A program that, on SIGTERM, takes DRAIN_S to drain, writes `drained`, and exits; it says `up` once it handles it.
DRAIN_S = 0.5
PROGRAM = (
    "import signal, sys, time\n"
    "def drain(*_):\n"
    f"    time.sleep({DRAIN_S}); open('drained', 'w').write('yes'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, drain)\n"
    "open('up', 'w').write('yes')\n"
    "time.sleep(60)\n"
)


def test_a_shells_program_gets_its_grace_and_is_gone_when_stop_returns(tmp_path: pathlib.Path):
    script = tmp_path / "drain.py"
    script.write_text(PROGRAM)
    proc = spawn(["/bin/sh", "-c", f"cd {tmp_path} && {sys.executable} {script}"], tmp_path / "log")
    deadline = time.monotonic() + 10
    while not (tmp_path / "up").exists():  # its handler is in place
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "log").read_text()
        time.sleep(0.01)
    assert len(group_members(proc.pid)) == 2  # the shell and its program: the program is not the shell (no exec)

    stop_processes([proc], grace_s=5)  # a grace far longer than the drain: it must not be cut short

    # the shell died of SIGTERM at once; its program drained (DRAIN_S) within the grace, and then was gone
    assert (tmp_path / "drained").read_text() == "yes"
    assert group_members(proc.pid) == []
