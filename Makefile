# Two entry points for a fresh Debian machine: `make demo` (the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench dashboards clean

# uv installs the same set as pip in well under half the time (`time make .venv/.installed` on a fresh clone,
# 2 cores: 32 s, against 76 s with pip), bytecode compiled as pip does: without it a process importing grpc
# takes twice the CPU to start wherever PYTHONDONTWRITEBYTECODE is set
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q 'uv>=0.5'
	$(VENV)/bin/uv pip install --python $(PY) -q --compile-bytecode -e '.[dev]'
	touch $(STAMP)

# drill harness into .venv, and the fleet's Go and Node hops (docs/fleet.md) when Go and Node are on the machine
# (the first of the three commands in docs/proxy.md's fastest path needs neither)
install: $(STAMP)
	@if command -v go >/dev/null && command -v npm >/dev/null; then $(PY) -m harness.fleet.build; \
	else echo "make install: no go or npm here: the fleet's hops (drill run retry-storm-go) are not built"; fi

demo: $(STAMP)
	$(VENV)/bin/drill demo --out drill-out

# five workers on two cores: most of the suite waits on wall-clock drill phases, not on the CPU (with four, the
# box used 1.5 of its 2 cores over a run: 501 s of CPU in 320 s); five fill those waits (pytest 288 s and 300 s in
# two runs here against 316-321 s with four), six starve the live drills (a guard test missed its trip at 293 s).
# Every test holds beside two CPU hogs at four
test: $(STAMP)
	scripts/system-deps
	@# the suite starts a few hundred Python processes; where PYTHONDONTWRITEBYTECODE is set (CI) none of them
	@# would cache its imports: compiled once here, each start is ~0.2 s of CPU cheaper
	$(PY) -m compileall -q harness loadtests tests >/dev/null
	@# the fleet's Go and Node hops, built beside the steps below and the workers' start: a fresh clone has
	@# neither, and the worker that first needs them built them under the load of four others (24 s in one CI
	@# run, 4.6 s alone); a worker that needs them now waits on the build's lock, and a failed build is retried
	@# there and fails its tests in one line
	$(PY) -m harness.fleet.build >/dev/null 2>&1 &
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider -n 5 --dist loadfile --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check harness tests benchmarks loadtests dashboards

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

dashboards: $(STAMP)
	$(VENV)/bin/drill dashboards build

clean:
	rm -rf $(VENV) drill-out
