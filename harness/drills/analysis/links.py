"""A link fault's trials in words: what the fault touched and whether each configuration met its `expect`.

Each trial's `link` (results.json, written by the runner from the relay: `stack.links.TrialLinks.summary`)
says which connections the toxic acted on, the calls on them (organic and drill), when the callers closed
the connections it held at its start (`detected_s`: the last of them; None when one outlived the fault) and,
with `fault.link.expect`, whether `detected_s` was within `detect_within_s`. Here: one note per
configuration for results.json and the report, and the reasons `--fail-on expect` holds (exit 3).
"""

from __future__ import annotations

from collections.abc import Mapping


def _trials(config: Mapping) -> list[dict]:
    return [t for t in (config.get("trials") or [config]) if t.get("link")]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def link_notes(configs: Mapping[str, Mapping]) -> list[str]:
    """One line per configuration with a link fault: detection, expectation, calls touched, the relay's mode."""
    out = []
    for name, config in configs.items():
        trials = _trials(config)
        if not trials:
            continue
        links = [t["link"] for t in trials]
        first = links[0]
        found = [lk["detected_s"] for lk in links if lk.get("detected_s") is not None]
        held = sum(1 for lk in links if lk.get("connections_held_at_start"))
        if not held:
            detect = "the fault held no open connection at its start (nothing to detect)"
        elif found:
            detect = (f"callers closed the connections it held after {', '.join(f'{s:.2f}' for s in found)} s "
                      f"in {len(found)} of {_plural(len(links), 'trial')}")  # fmt: skip
        else:
            detect = f"no caller closed a connection it held before the fault ended ({_plural(len(links), 'trial')})"
        expect = ""
        if first.get("expect") is not None:
            met = sum(1 for lk in links if lk["expect"]["met"])
            expect = (f"; expect detect within {first['expect']['detect_within_s']:g} s: "
                      f"{'met' if met == len(links) else 'NOT met'} ({met} of {len(links)})")  # fmt: skip
        organic = sum(lk["calls_touched"]["organic"] for lk in links)
        drill = sum(lk["calls_touched"]["drill"] for lk in links)
        conns = sum(lk["connections_faulted"] for lk in links)
        out.append(f"{name}: link {first['link']} {first['toxic']} ({first['mode']}): "
                   f"{detect}{expect}; it touched {organic} organic and {drill} drill calls on "
                   f"{_plural(conns, 'connection')}")  # fmt: skip
    return out


def expect_reasons(results: Mapping) -> list[str]:
    """Each configuration whose link fault's `expect` was not met in some trial (`--fail-on expect`)."""
    out = []
    configs = results.get("configs") or {}
    for name in results.get("ranking") or list(configs):
        links = [t["link"] for t in _trials(configs[name]) if t["link"].get("expect") is not None]
        missed = [lk for lk in links if not lk["expect"]["met"]]
        if missed:
            within = missed[0]["expect"]["detect_within_s"]
            seen = ", ".join("never" if lk["detected_s"] is None else f"{lk['detected_s']:.2f} s" for lk in missed)
            out.append(f"{name} did not detect within {within:g} s in {len(missed)} of "
                       f"{_plural(len(links), 'trial')} ({seen})")  # fmt: skip
    return out
