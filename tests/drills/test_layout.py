"""The drill's stages as packages (docs/architecture.md): every package is in the layer contract, each says
what it owns, and the public names of `harness.drills` load lazily from the module that defines them."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import pytest
import tomllib

import harness.drills
from tests.conftest import ROOT

DRILLS = ROOT / "harness" / "drills"
STAGES = sorted(p.name for p in DRILLS.iterdir() if (p / "__init__.py").is_file())


def _contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in config if c.get("containers") == ["harness.drills"])


def test_every_stage_package_is_in_the_layer_contract_once():
    layers = [name.strip() for layer in _contract()["layers"] for name in layer.split("|")]
    assert sorted(layers) == STAGES, "a package of harness/drills/ outside the stages' contract escapes it"
    assert not [p.name for p in DRILLS.glob("*.py") if p.name != "__init__.py"], "a module outside every stage"


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_says_what_it_owns_and_what_it_may_import(stage):
    doc = importlib.import_module(f"harness.drills.{stage}").__doc__ or ""
    assert "Owns:" in doc and "May import:" in doc, f"harness/drills/{stage}/__init__.py"


def test_the_public_names_are_the_objects_their_stages_define():
    for name in harness.drills.__all__:
        module = importlib.import_module(f"harness.drills.{harness.drills._PUBLIC[name]}")
        assert getattr(harness.drills, name) is getattr(module, name), name
    with pytest.raises(AttributeError):
        harness.drills.not_a_public_name  # noqa: B018


def test_importing_the_package_or_one_name_loads_only_what_that_name_needs():
    code = (
        "import sys, harness.drills as d\n"
        "print(sorted(m for m in sys.modules if m.startswith('harness.drills.')))\n"
        "d.tagged_ids\n"
        "print(sorted(m.split('.')[2] for m in sys.modules if m.startswith('harness.drills.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    alone, after = out.stdout.splitlines()
    assert alone == "[]"
    # the schedule and the plan's types it is written in: no runner, no analysis, no report
    assert set(eval(after)) == {"load", "plan"}, after


def test_the_plan_schema_stays_where_editors_find_it():
    from harness.drills.plan.files import SCHEMA_PATH

    assert SCHEMA_PATH == DRILLS / "plan.schema.json" and SCHEMA_PATH.is_file()
    assert pathlib.Path(SCHEMA_PATH).relative_to(ROOT).as_posix() in (ROOT / "README.md").read_text()


SWEEP_MODULES = sorted(p.stem for p in (DRILLS / "sweep").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("module", SWEEP_MODULES)
def test_every_sweep_module_has_its_test_module_and_is_named_in_the_architecture(module):
    assert (ROOT / "tests" / "drills" / "sweep" / f"test_{module}.py").is_file(), f"tests/drills/sweep/test_{module}.py"
    row = next(line for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
               if line.startswith("| 8 | `sweep/` |"))  # fmt: skip
    assert f"`{module}`" in row, f"docs/architecture.md's sweep row does not name {module}"
    assert f"`{module}`" in (importlib.import_module("harness.drills.sweep").__doc__ or ""), "sweep/__init__.py"
