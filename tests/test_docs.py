"""Every example in README.md and docs/ is checked, so the docs cannot drift from the code again.

Each fenced block is extracted. Shell commands are checked for what they name: a `drill`
command parses with the real parser (its subcommand and flags exist) and the plan, files and
configurations it names exist and load; `make` targets exist; `docker compose -f F` names a file
and services that exist; `kubectl apply -k D` names a kustomization; `locust --config`, scripts
and `python FILE` name files that exist. Quick examples that show their output (`drill hits … <
ids` followed by `# id<TAB>hit…`) are run and their output compared. Python blocks compile and
their `harness` imports resolve; YAML blocks that are plans load as plans. Links between docs
resolve inside the repository, and no doc sends a reader outside it.

A shell block runs what `make` installs into .venv as `.venv/bin/drill` (`locust`, `python`, …: they are
not on PATH; README's Quick start says so once, and how to activate the venv), and README's quoted
`drill hits` refusal is run and compared with what the tool prints.

Long examples (drills of minutes, anything needing Docker or a cluster) are checked, not run.
Placeholders are written in capitals (PLAN.yaml, BASELINE.json, MASTER) and skipped.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from harness import cli
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    """(doc name, block text) of every fenced block in that language."""
    out = []
    for doc in DOCS:
        for got, body in FENCE.findall(doc.read_text()):
            if got == lang:
                out.append((doc.relative_to(ROOT).as_posix(), body))
    return out


def commands(body: str) -> list[tuple[str, list[str]]]:
    """(command line, output lines shown under it) of a shell block; continuations joined, comments cut."""
    lines = body.replace("\\\n", " ").splitlines()
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if out and "\t" in stripped:  # an output line shown under the command
                out[-1][1].append(stripped[1:].strip())
            continue
        command = re.sub(r"\s+#\s.*$", "", stripped).strip()
        out.append((command, []))
    return out


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at &&, ||, |, ;), env assignments and redirections dropped."""
    out = []
    for part in re.split(r"&&|\|\||\||;", line):
        words = shlex.split(part.replace("&", " ") if part.rstrip().endswith("&") else part, comments=True)
        words = [w for w in words if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w)]
        cut = next((i for i, w in enumerate(words) if w in ("<", ">", "2>") or w.startswith(("<", ">"))), None)
        words = words[:cut] if cut is not None else words
        if words:
            out.append(words)
    return out


SHELL = [(doc, line, shown) for doc, body in blocks("sh") for line, shown in commands(body)]


def _placeholder(word: str) -> bool:
    return bool(re.search(r"[A-Z]{2,}", pathlib.Path(word).stem)) or word.startswith(("$", "<"))


def _check_drill(words: list[str], doc: str) -> None:
    argv = words[1:]
    sub = next((a for a in argv if not a.startswith("-")), "")
    parser = cli.build_parser(only=sub)
    args = parser.parse_args(argv)  # a wrong subcommand or flag exits 2 here (pytest reports it)
    # a plan the doc itself shows ("saved as `cart.yaml`") is checked with the doc's YAML blocks
    shown = f"saved as `{getattr(args, 'plan', '')}`" in (ROOT / doc).read_text()
    if sub == "run" and not _placeholder(args.plan) and not shown:
        from harness.drills.plan.files import load_plan

        load_plan(args.plan, quick=getattr(args, "quick", False))
    for flag in ("series", "results"):
        value = getattr(args, flag, None)
        if value and not _placeholder(value) and not value.startswith(("out/", "drill-out")):
            assert (ROOT / value).exists(), value


def _check_file_words(words: list[str]) -> None:
    """Every argument that looks like a repository path exists (outputs, placeholders and URLs aside)."""
    outputs = {"--out", "--csv", "--json", "-o", "--storage.tsdb.path"}
    for prev, word in zip(["", *words], words, strict=False):
        if prev in outputs or "://" in word or _placeholder(word) or word.startswith(("/tmp/", "-")):
            continue
        if re.fullmatch(r"(\./)?(compose|deploy|loadtests|benchmarks|harness|docs|scripts|tests)/[\w./*-]+", word):
            matches = list(ROOT.glob(word.removeprefix("./"))) if "*" in word else [ROOT / word]
            assert matches and all(m.exists() for m in matches), f"{word} does not exist"


@pytest.mark.parametrize("doc, line, shown", SHELL, ids=[f"{d}:{c[:50]}" for d, c, _ in SHELL])
def test_shell_examples_name_what_exists(doc, line, shown):
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    makefile = (ROOT / "Makefile").read_text()
    for words in simple_commands(line):
        program = pathlib.Path(words[0]).name
        if program == "drill":
            _check_drill(words, doc)
        elif program == "make":
            for target in words[1:]:
                assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target}: no such target"
        elif program == "docker" and words[1:2] == ["compose"]:
            services = [w for w in words if w in compose["services"]]
            named = [w for w in words[words.index("up") + 1 :] if not w.startswith("-")] if "up" in words else []
            assert set(named) <= set(services) | set(compose["services"]), named
        elif program == "kubectl" and "-k" in words:
            target = words[words.index("-k") + 1]
            assert (ROOT / target / "kustomization.yaml").exists(), target
        _check_file_words(words)


def _shown_runs() -> list[tuple[str, str, list[str]]]:
    return [(doc, line, shown) for doc, line, shown in SHELL if shown and "drill hits" in line]


@pytest.mark.parametrize("doc, line, shown", _shown_runs(), ids=[c[:60] for _, c, _ in _shown_runs()])
def test_quick_examples_print_what_the_docs_show(doc, line, shown):
    """`drill hits … < ids.txt` with its output shown: the ids of the shown lines are fed in, the output compared."""
    words = simple_commands(line)[-1]
    ids = "".join(s.split("\t")[0] + "\n" for s in shown)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *words[1:]], input=ids, capture_output=True,
                          text=True, cwd=ROOT, timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == shown, (doc, line)


PY = blocks("python")


@pytest.mark.parametrize("doc, body", PY, ids=[f"{d}:{b.splitlines()[0][:40]}" for d, b in PY])
def test_python_examples_compile_and_import_what_exists(doc, body):
    tree = ast.parse(body)  # a syntax error fails here
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "harness":
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


PLANS = [(doc, body) for doc, body in blocks("yaml") if re.search(r"^(stack|topology):", body, re.M)]


@pytest.mark.parametrize("doc, body", PLANS, ids=[f"{d}:{i}" for i, (d, _) in enumerate(PLANS)])
def test_plan_examples_are_valid_plans(doc, body, tmp_path):
    from harness.drills.plan.files import from_dict

    data = yaml.safe_load(body)
    stack = data.get("stack") or {}
    for section in (stack.get("edge") or {}, stack.get("proxy") or {}):
        for key in ("proto", "descriptor_set"):  # files of the reader's own service
            if section.get(key):
                (tmp_path / section[key]).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / section[key]).write_text("")
    from_dict(data, source=str(tmp_path / "plan.yaml"))


def test_shipped_stack_files_load():
    from harness.drills.plan.files import load_plan

    for path in ("compose/stack.yaml", "deploy/k8s/stack.yaml", "benchmarks/stacks/external-chain.yaml"):
        assert load_plan(str(ROOT / path)).stack is not None, path


LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_links_resolve_inside_the_repository(doc):
    text = doc.read_text()
    assert "../shared" not in text and not re.search(r"DESIGN\s*§", text), f"{doc.name} points outside the repo"
    for target, _ in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = (doc.parent / target).resolve()
        assert path.exists() and ROOT in path.parents, f"{doc.name}: link {target} does not resolve in the repo"


THIS = "tests/test_docs.py"  # names the patterns it looks for


def test_nothing_shipped_points_outside_the_repository():
    """Dashboards (their descriptions show in Grafana), plans, configs and code name the repo's own docs
    (docs/contracts.md), never a design file a user does not have."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    outside = []
    for name in tracked:
        if not name.endswith((".py", ".json", ".yaml", ".yml", ".md", ".toml", ".sh", ".conf")) or name == THIS:
            continue
        text = (ROOT / name).read_text(errors="replace")
        if "../shared" in text or re.search(r"DESIGN\s*(§|\\u00a7)", text):
            outside.append(name)
    assert not outside, outside


# --- where the commands live ------------------------------------------------------------------------
#: what `make demo` / `make test` install into .venv/bin and nowhere else: a shell block writes them with that
#: path (README's Quick start says so once, and how to activate the venv instead)
VENV_PROGRAMS = {"drill", "locust", "python", "pip", "pytest", "ruff", "lint-imports"}


@pytest.mark.parametrize("doc, line, shown", SHELL, ids=[f"{d}:{c[:50]}" for d, c, _ in SHELL])
def test_shell_examples_run_the_venvs_programs_from_the_venv(doc, line, shown):
    """`drill` is not on PATH after `make demo`: a block a reader pastes runs `.venv/bin/drill`."""
    for words in simple_commands(line):
        assert words[0] not in VENV_PROGRAMS, f"{doc}: `{words[0]}` is .venv/bin/{words[0]} after make: {line}"


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_the_quick_start_is_two_commands_and_says_where_drill_lives():
    """A fresh Debian machine: `make demo` and the test command, what a minimal Debian lacks, and where `drill` is."""
    quick = _section((ROOT / "README.md").read_text(), "Quick start")
    (block,) = [body for lang, body in FENCE.findall(quick) if lang == "sh"]
    assert [c for c, _ in commands(block)] == ["make demo", "make test"]
    assert "make" in quick and "python3-venv" in quick and "apt-get install" in quick
    assert "`.venv/bin/drill`" in quick and "`. .venv/bin/activate`" in quick


#: README quotes a refusal of `drill hits` next to the command that gets it: `CMD` prints `drill: hits: …`
QUOTED_REFUSAL = re.compile(r"`((?:\.venv/bin/)?drill hits [^`]*)`\s+prints\s+`(drill: [^`]*)`")


def test_the_readmes_quoted_hits_refusal_is_what_the_tool_prints():
    """The quote is the tool's own line: exactly, up to a closing `…` that stands for the reason in words.

    The quoted part is worded by harness/drills/cli/hits.py itself (the reason after it comes from the fault
    grammar's own messages, harness/core/reasons.py, and may change with them)."""
    text = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    quotes = QUOTED_REFUSAL.findall(text)
    assert quotes, "README no longer quotes a `drill hits` refusal next to its command"
    hits_source = (ROOT / "harness" / "drills" / "cli" / "hits.py").read_text()
    for command, quote in quotes:
        words = simple_commands(command)[0]
        proc = subprocess.run([sys.executable, "-m", "harness.cli", *words[1:]], input="req-1\nreq-2\n",
                              capture_output=True, text=True, cwd=ROOT, timeout=30)  # fmt: skip
        assert proc.returncode == 2 and proc.stdout == "", (command, proc.returncode, proc.stdout)
        printed = proc.stderr.splitlines()
        assert len(printed) == 1, proc.stderr
        if quote.endswith("…"):
            fixed = quote[:-1]
            assert printed[0].startswith(fixed) and len(printed[0]) > len(fixed), (quote, printed[0])
        else:
            assert printed[0] == quote
        said = quote.removeprefix("drill: hits: ").rstrip("…").rstrip(": ")
        assert said in hits_source, f"the quote depends on a message hits.py does not word: {said!r}"
