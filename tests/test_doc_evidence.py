"""Every figure the docs quote from a saved run is in that run's saved output, every saved output
names the commit it ran on, and the docs speak to users.

**Evidence units.** README.md and docs/*.md are cut into units: a paragraph (or one list item), one
table row, one fenced block. A unit *cites* a saved output when it names a file of
benchmarks/results/ (a link, a path, or the bare file name; `{1,2,3}`, `{4..12}`, `NAME` (a
benchmark's name) and `*` expand to the files they match). A table, a block quote and a fenced block
without a language (quoted output) right after a paragraph that ends with a colon (their caption)
also carry that paragraph's citations; right after a command block, they carry the citations of
the paragraph before that block (they are its command's output), and a table right after another
table keeps the first one's caption. A path into benchmarks/results/ that matches no file fails.

**Measurements cite.** A table with a column of figures only is a measurement: it cites its saved
outputs, or its caption says it is computed, not measured. A paragraph that says it observed a
figure on a machine ("measured here", "on this machine", "on 2 cores", "load average", "in these
runs", "saved runs") and quotes a time, size, rate, share or factor cites the saved output.

**Figures.** In a unit that cites saved outputs, every number outside code spans, fenced command
blocks, link targets and the citations themselves is a figure and must *appear* in one of the cited
files (or in the JSON of the same run as a cited `.txt`, see below): the file holds a number of the
same value. A number is digits with an optional decimal part
and optional thousands separators (`383,973`), not glued to a letter (`p99`, `h2` and `ef38628` are
not numbers, nor is an issue's `#43360`), and not a bound (a number right after ≤, ≥, < or > is a
target or a limit); its sign (`-`, `−`, `+`) is ignored. "The same value" is decimal equality, so
`20` matches `20.0` and `0.90` matches `0.9`, but `0.5` does not match `0.52`: no rounding is
allowed. A percentage also matches its share (`68.3 %`, or the `68.3` of `68.3–73.9 %`, matches a
results.json's `0.683`). A doc quotes the file's own digits, or leaves the number out, or cites the file that holds
it.

**Provenance.** Every saved output names the commit it ran on: one of its first lines holds
`commit HEX` (a commit of this repository, and no `+uncommitted` anywhere in those lines), or a line
starting `# rerun:` with the command that would replace it (a run whose commit is not known for
certain, marked for a rerun on a quiet box). A `.json`/`.jsonl` output is covered by the `.txt` of
the same run: the longest `.txt` name it starts with. The benchmark scripts stamp the commit
themselves (`benchmarks/_cpu.py`); a `drill run` output saved here starts with the command line and
`# commit HEX, date, cores, load average`.

**Words for users** (README.md and docs/): no history ("the previous rule", "the old …", "since
then", "has since", also wrapped across lines), no "this stop", "this change" or "this branch", no issue
numbers of this project ("issue 13", "#43361"; an upstream issue is written owner/repo#N), and a
commit hash only as the provenance of a saved output: in a unit that cites a saved output whose name
or text holds that hash, never as a date ("since 80e31eb").
"""

from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
from decimal import Decimal

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULTS = ROOT / "benchmarks" / "results"
SAVED = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
HEADER_LINES = 12

#: a saved output named in a doc: an optional path into benchmarks/results/, then a file name that may hold
#: patterns ({1,2,3}, {4..12}, NAME, *); not a file of another folder (OUT/results.json)
CITATION = re.compile(r"(?<![\w/.-])((?:\.\./)?benchmarks/results/)?([\w{}*][\w.{},*-]*\.(?:txt|json|jsonl))\b")
NUMBER = re.compile(r"(?<![\w.,#])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w|\.\d|,\d)")
#: in saved outputs every reading counts: `10,200` is 10200 and 10 and 200
FILE_NUMBER = re.compile(r"\d+(?:\.\d+)?")
HASH = re.compile(r"(?<![\w/.:-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
STAMP = re.compile(r"\bcommit:? ([0-9a-f]{7,40})\b")


@dataclasses.dataclass
class Unit:
    doc: str
    line: int
    kind: str  # paragraph, row, fence, quote, heading
    text: str
    lang: str = ""
    cites: tuple[str, ...] = ()


def _expand(pattern: str) -> list[str]:
    """`a-{1,2}.txt` → [a-1.txt, a-2.txt]; `{4..6}` → 4, 5, 6."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    inner = m.group(1)
    if re.fullmatch(r"\d+\.\.\d+", inner):
        lo, hi = (int(x) for x in inner.split(".."))
        choices = [str(i) for i in range(lo, hi + 1)]
    else:
        choices = inner.split(",")
    return [x for c in choices for x in _expand(pattern[: m.start()] + c + pattern[m.end() :])]


def cited(text: str) -> tuple[list[str], list[str]]:
    """(saved outputs a text names, paths into benchmarks/results/ that match no file)."""
    files, missing = [], []
    for m in CITATION.finditer(text):
        prefixed, name = m.group(1), m.group(2)
        found = []
        for pattern in _expand(name):
            # NAME stands for a benchmark's name (delay_accuracy), * for anything
            rx = "".join("[a-z_]+" if part == "NAME" else ".*" if part == "*" else re.escape(part)
                         for part in re.split(r"(NAME|\*)", pattern))  # fmt: skip
            found += [f for f in SAVED if re.fullmatch(rx, f)]
        if not found and prefixed:
            missing.append(prefixed + name)
        files += found
    return sorted(set(files)), missing


def units(doc) -> list[Unit]:
    """The doc cut into units, each table, quote and unlabelled fence carrying its caption's citations."""
    name = doc.relative_to(ROOT).as_posix()
    lines = doc.read_text().splitlines()
    out: list[Unit] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.lstrip().startswith("```"):
            lang = line.strip()[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            out.append(Unit(name, i + 1, "fence", "\n".join(lines[i + 1 : j]), lang))
            i = j + 1
            continue
        if line.lstrip().startswith("|"):
            if not re.fullmatch(r"\s*\|[\s|:-]*\|\s*", line):
                out.append(Unit(name, i + 1, "row", line))
            i += 1
            continue
        if line.startswith("#"):
            out.append(Unit(name, i + 1, "heading", line))
            i += 1
            continue
        kind = "quote" if line.startswith(">") else "paragraph"
        j = i + 1
        while j < len(lines) and lines[j].strip() and not re.match(r"\s*(```|\||#|[-*] |\d+\. )", lines[j]):
            j += 1
        out.append(Unit(name, i + 1, kind, "\n".join(lines[i:j])))
        i = j
    caption: tuple[str, ...] = ()
    for k, unit in enumerate(out):
        own = tuple(cited(unit.text)[0])
        previous = out[k - 1] if k else None
        starts_table = unit.kind == "row" and not (previous and previous.kind == "row")
        quoted = unit.kind == "quote" or (unit.kind == "fence" and unit.lang in ("", "text"))
        if starts_table or quoted:
            caption = _caption(out[:k])
        unit.cites = tuple(sorted(set(own) | set(caption))) if unit.kind == "row" or quoted else own
        # a table right after another table (a blank line between) keeps the first one's caption
    return out


def _caption(before: list[Unit]) -> tuple[str, ...]:
    """The citations a table or quoted output takes from what comes right before it: a paragraph ending
    with a colon; or, right after a command block, the paragraph before that block whatever its ending
    (the table is that command's output, and the paragraph that gives the command names its saved run)."""
    if not before:
        return ()
    previous = before[-1]
    if previous.kind == "paragraph" and previous.text.rstrip().endswith(":"):
        return previous.cites
    if previous.kind == "fence" and previous.lang not in ("", "text") and len(before) > 1:
        above = before[-2]
        return above.cites if above.kind == "paragraph" else ()
    return ()


ALL_UNITS = [u for doc in DOCS for u in units(doc)]


def prose(unit: Unit) -> str:
    """What a unit says in words: code spans, link targets, URLs, citations and section signs taken out."""
    if unit.kind == "fence":
        return unit.text if unit.lang in ("", "text") else ""
    text = re.sub(r"`[^`]*`", " ", unit.text)
    text = re.sub(r"\]\([^)]*\)", "] ", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = CITATION.sub(" ", text)
    text = re.sub(r"[\w/.-]*/[\w.-]+\.(?:md|py|yaml|json|txt|conf)\b", " ", text)  # other files' paths
    return re.sub(r"§\s*\d+", " ", text)


def figures(text: str, *, shares: bool = False) -> list:
    """The numbers of a text, bounds aside: a number right after ≤, ≥, < or > is a target or a limit
    ("≤ 400 µs", "< 50 ms"), not a figure read from a run. With `shares`, (number, its share): a
    percentage's value ÷ 100 (68.3 % is the 0.683 a results.json holds), else None."""
    out = []
    for m in NUMBER.finditer(text):
        if re.search(r"[≤≥<>]\s*[-+−~≈]?\s*$", text[: m.start()]):
            continue
        percent = re.match(r"\s?%", text[m.end() :]) or re.match(r"(?:\s*[–-]\s*[\d.]+)+\s?%", text[m.end() :])
        out.append((m.group(0), value(m.group(0)) / 100 if percent else None) if shares else m.group(0))
    return out


def value(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


@functools.cache
def numbers_in(name: str) -> frozenset[Decimal]:
    """Every value a saved output holds, whatever the grouping: `10,200` gives 10200, 10 and 200."""
    text = (RESULTS / name).read_text(errors="replace")
    found = {value(m.group(0)) for m in FILE_NUMBER.finditer(text)}
    found |= {value(m.group(0)) for m in re.finditer(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", text)}
    return frozenset(found)


CITING = [u for u in ALL_UNITS if u.cites]


@pytest.mark.parametrize("unit", CITING, ids=[f"{u.doc}:{u.line}" for u in CITING])
def test_quoted_figures_appear_in_the_outputs_they_cite(unit):
    runs = set(unit.cites)
    runs |= {f for f in SAVED if not f.endswith(".txt") and _run_of(f) in runs}  # the same run's JSON
    held = frozenset().union(*(numbers_in(f) for f in runs))
    text = prose(unit)
    absent = [n for n, share in figures(text, shares=True) if value(n) not in held and share not in held]
    assert not absent, f"{unit.doc}:{unit.line}: {absent} not in {', '.join(unit.cites)}"


#: what a cell of measured figures holds besides its numbers: units, signs, ranges, arrows, emphasis
CELL_FILLER = re.compile(r"µs|ms|MB|KB|KiB|GB|calls/s|bytes|[s%×x]\b|[\s+\-−–~≈→/,;.()\[\]*✓]")


def _numeric(cell: str) -> bool:
    """A cell that holds figures and nothing else ("+983.2", "12.89 ms (2.34)", "50.0% → 50.0%")."""
    cell = re.sub(r"`[^`]*`", "x", cell)
    if re.fullmatch(r"[\[(]\s*-?[\d,]+\s*,\s*-?[\d,]+\s*[\])]", cell):  # an interval: a key's bounds
        return False
    return bool(NUMBER.search(cell)) and not CELL_FILLER.sub("", NUMBER.sub("", cell))


def tables(doc) -> list[tuple[Unit, list[Unit], str]]:
    """(header row, body rows, caption text) of each table of a doc; the caption is the paragraph right
    before the table, or right before the command block right before it."""
    lines = doc.read_text().splitlines()
    found: list[tuple[Unit, list[Unit], str]] = []
    doc_units = units(doc)
    for k, unit in enumerate(doc_units):
        if unit.kind != "row":
            continue
        below = lines[unit.line] if unit.line < len(lines) else ""
        if re.fullmatch(r"\s*\|[\s|:-]*\|\s*", below):  # a header: the separator follows it
            before = [u for u in doc_units[max(0, k - 2) : k]]
            caption = ""
            if before and before[-1].kind == "paragraph":
                caption = before[-1].text
            elif len(before) == 2 and before[-1].kind == "fence" and before[0].kind == "paragraph":
                caption = before[0].text
            found.append((unit, [], caption))
        elif found:
            found[-1][1].append(unit)
    return found


def _cells(row: Unit) -> list[str]:
    return [c.strip() for c in row.text.strip().strip("|").split("|")]


MEASURED_TABLES = [
    (header, body, caption)
    for doc in DOCS
    for header, body, caption in tables(doc)
    if any(
        len(body) > 1 and all(len(_cells(r)) > col and _numeric(_cells(r)[col]) for r in body)
        for col in range(1, len(_cells(header)))
    )
]


@pytest.mark.parametrize("header, body, caption", MEASURED_TABLES,
                         ids=[f"{h.doc}:{h.line}" for h, _, _ in MEASURED_TABLES])  # fmt: skip
def test_tables_of_figures_cite_the_runs_that_measured_them(header, body, caption):
    """A table with a column of figures only is a measurement: it cites its saved outputs (in its rows, its
    caption, or the caption of the command block right above it), or its caption says it is computed, not
    measured (a sizing from a formula)."""
    cites = set(header.cites).union(*(r.cites for r in body))
    computed = re.search(r"\bcomputed\b|\bnot measured\b", caption)
    assert cites or computed, (
        f"{header.doc}:{header.line}: a table of figures that cites no saved output and does not say it is "
        f"computed: {header.text[:80]}"
    )


#: a unit that says it observed something on a machine, not what the code guarantees
SAYS_MEASURED = re.compile(
    r"\bmeasured (?:here|on|at|beside)\b|\bon this (?:\d-core )?(?:machine|box|VM|host)\b|\bon (?:2|two) cores\b"
    r"|\bon a (?:\w+ )?2-core (?:box|machine|VM|host)\b"
    r"|\bload average\b|\b(?:in|over|of) (?:these|the saved|the two saved|two saved|concurrent|three|ten) "
    r"(?:runs|rounds)\b|\bsaved runs?\b|\bthe printed trial\b"
)
#: a figure with a unit of what a run measures (a time, a size, a rate, a share, a factor)
MEASURE = re.compile(r"(?<![\w.,])(?:[\d.,]+\s?[–-]\s?)?[\d.,]*\d\s?"
                     r"(?:µs|ms|s|min|MB|KB|KiB|%|×|calls/s|attempts/s|retries/s|bytes)(?!\w)")
BOUND = re.compile(r"[≤≥<>]\s*[-+−~≈]?\s*$")
SAYING = [u for u in ALL_UNITS if u.kind in ("paragraph", "quote") and not u.cites]


@pytest.mark.parametrize("unit", SAYING, ids=[f"{u.doc}:{u.line}" for u in SAYING])
def test_what_a_doc_says_it_measured_cites_the_saved_output(unit):
    """A paragraph that says it observed a figure on a machine ("measured here", "on 2 cores", "in these
    runs", "load average") quotes it from a saved output it cites, or states only what the code or a test
    guarantees (a bound, written with ≤ or <, is not a figure)."""
    text = re.sub(r"\s+", " ", prose(unit))
    said = SAYS_MEASURED.search(text)
    measured = [m.group(0) for m in MEASURE.finditer(text) if not BOUND.search(text[: m.start()])]
    assert not (said and measured), (
        f"{unit.doc}:{unit.line}: says {said.group(0)!r} and quotes {measured} without citing a saved output"
    )


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_paths_into_saved_outputs_resolve(doc):
    _, missing = cited(doc.read_text())
    assert not missing, f"{doc.name} cites saved outputs that do not exist: {missing}"


def test_every_path_into_saved_outputs_in_the_repository_resolves():
    """Code, tests and plans that name a saved output (`benchmarks/results/NAME`) name one that exists."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for name in tracked:
        if name.startswith("benchmarks/results/") or not name.endswith((".py", ".yaml", ".yml", ".md", ".conf")):
            continue
        text = (ROOT / name).read_text(errors="replace")
        missing += [f"{name}: {m}" for m in cited(text)[1]]
    assert not missing, missing


# --- provenance -----------------------------------------------------------------------------------
def _run_of(name: str) -> str:
    """The .txt output that names the commit of `name` (itself, or for JSON the .txt of the same run)."""
    if name.endswith(".txt"):
        return name
    stems = [f[:-4] for f in SAVED if f.endswith(".txt")]
    runs = [s for s in stems if name.startswith(s) and name[len(s)] in ".-"]
    assert runs, f"{name}: no .txt output of the same run names its commit"
    return max(runs, key=len) + ".txt"


@functools.cache
def _is_commit(sha: str) -> bool:
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()  # fmt: skip
    if shallow != "false":  # a shallow clone cannot tell; the form was checked
        return True
    got = subprocess.run(["git", "cat-file", "-t", sha], cwd=ROOT, capture_output=True, text=True)
    return got.stdout.strip() == "commit"


def provenance(name: str) -> str | None:
    """Why a saved output's provenance is not stated (None when it is)."""
    run = _run_of(name)
    head = (RESULTS / run).read_text(errors="replace").splitlines()[:HEADER_LINES]
    if any(line.startswith("# rerun:") and len(line.split()) > 2 for line in head):
        return None
    text = "\n".join(head)
    if "uncommitted" in text:
        return f"{run} ran on uncommitted code: rerun it at a commit, or mark it `# rerun: COMMAND`"
    shas = STAMP.findall(text)
    if not shas:
        return f"{run} names no commit in its first {HEADER_LINES} lines (`commit HEX`, or `# rerun: COMMAND`)"
    unknown = [s for s in shas if not _is_commit(s)]
    return f"{run}: {unknown} is not a commit of this repository" if unknown else None


@pytest.mark.parametrize("name", SAVED)
def test_every_saved_output_names_the_commit_it_ran_on(name):
    why = provenance(name)
    assert why is None, why


# --- words for users ------------------------------------------------------------------------------
INTERNAL = re.compile(
    r"\b(?:this|the previous|previous|that|next) stop\b|\bstop's\b|\bthe stop before\b"
    # `#N` is an issue number, except the tool's own trial notation it prints: `(naive #1)`, `naive #2/4`
    r"|\bthis (?:change|branch)\b|\b[Ii]ssues? \d+|(?<![\w/])(?<![\w-] )#\d+\b|(?<![\w/])#\d+\b(?![)/])"
    # history: a doc says what the code does, not what it did before
    r"|\b(?:the )?previous (?:rule|method|code|version|design|behaviou?r|user|configuration|check)\b"
    r"|\b[Tt]he old\b|\b[Ss]ince then\b|\b(?:has|have) since\b|\bcame later\b|\bfrom then on\b"
)


def _saved_hashes(files: tuple[str, ...]) -> set[str]:
    out = set()
    for f in files:
        out |= set(HASH.findall(f)) | set(HASH.findall((RESULTS / f).read_text(errors="replace")))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_docs_speak_to_users(doc):
    said = []
    for unit in units(doc):
        text = unit.text if unit.kind != "fence" or unit.lang in ("", "text") else ""
        text = re.sub(r"\]\([^)]*\)|https?://\S+", " ", text)
        # a phrase may wrap a line ("before this\nchange"): matched on the text with its lines joined
        said += [f"{unit.doc}:{unit.line}: {m.group(0)!r}" for m in INTERNAL.finditer(re.sub(r"\s+", " ", text))]
        words = re.sub(r"`[^`]*`", " ", text)
        words = CITATION.sub(" ", words)
        hashes = set(HASH.findall(words))
        if hashes:
            stray = hashes - _saved_hashes(unit.cites)
            said += [f"{unit.doc}:{unit.line}: commit {h} is not the provenance of an output cited here"
                     for h in sorted(stray)]  # fmt: skip
    assert not said, "\n".join(said)


# --- what the docs say the verdict does -----------------------------------------------------------
def _trials(outages: list[float]) -> list[dict]:
    return [{"breached": o > 0, "outage_s": o, "budget_burn": o / 3} for o in outages]


def test_the_fewest_trials_that_name_a_winner_are_what_the_docs_say():
    """README ("Why four trials each") and docs/drills.md ("The rule", "Reading the demo"): breach counts
    alone need 4 + 4 trials (Fisher, two-sided, 0.05); a bootstrap CI names a winner from 3 + 3 when every
    trial of one configuration is better than every trial of the other, not when one pair overlaps; two
    trials each never name one."""
    from harness.drills.analysis import stats, verdict

    assert stats.fisher_p(0, 3, 3, 3) > stats.ALPHA > stats.fisher_p(0, 4, 4, 4)
    assert round(stats.fisher_p(0, 3, 3, 3), 2) == 0.10 and round(stats.fisher_p(0, 4, 4, 4), 3) == 0.029

    def winner(a: list[float], b: list[float]) -> str | None:
        return verdict.judge({"a": {"trials": _trials(a)}, "b": {"trials": _trials(b)}}, seed=42)[1]["winner"]

    assert winner([0, 0, 0], [6.0, 6.5, 7.0]) == "a"  # 3 + 3, separated: the outage CI excludes 0
    assert winner([0, 0, 6.5], [6.0, 6.5, 7.0]) is None  # one overlapping pair: it does not
    assert winner([0, 0], [6.0, 7.0]) is None  # 2 + 2: too few for the CI, Fisher p = 0.33
