# kafkasync developer entry points. Everything runs inside ./.venv, which
# `make venv` creates (from $(PYTHON)) and fills from constraints.txt.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PIP_INSTALL := $(PIP) install --disable-pip-version-check -q -c constraints.txt
# "compat" editable mode puts the checkout itself on sys.path (a plain .pth),
# so pkgutil.iter_modules() - which Spark uses to discover pyspark_* data
# source modules - sees pyspark_kafkasync. The default finder-hook mode hides it.
EDITABLE := --config-settings editable_mode=compat -e
# An editable install writes kafkasync.egg-info into the checkout, so two at once (CI makes its
# virtualenvs two at a time, .ci/run) take turns where flock exists. PySpark goes in first, on
# its own: the minute its sdist takes to build and unpack touches nothing in the checkout.
ONE_AT_A_TIME := $(shell command -v flock >/dev/null 2>&1 && echo flock $(CURDIR)/.editable-install.lock)

# Re-install only when the dependency declarations change.
STAMP       := $(VENV)/.kafkasync-test.stamp
BENCH_STAMP := $(VENV)/.kafkasync-bench.stamp
LINT_STAMP  := $(VENV)/.kafkasync-lint.stamp
RELEASE_STAMP := $(VENV)/.kafkasync-release.stamp
DOCS_STAMP    := $(VENV)/.kafkasync-docs.stamp

PYTEST_ARGS ?=

.PHONY: venv venv-extras versions-venvs parity-venv broker-jars lint docs release-check versions test test-loaded test-core test-slow demo demo-real integration parity bench bench-smoke bench-smoke-core bench-smoke-side-by-side bench-soak clean distclean check-tools

venv: $(STAMP)

check-tools:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null || { \
	  v=$$($(PYTHON) -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "not a runnable Python"); \
	  echo "error: kafkasync needs Python >= 3.10, but PYTHON=$(PYTHON) is $$v." >&2; \
	  echo "       Run e.g. 'make PYTHON=python3.11 $(or $(MAKECMDGOALS),venv)'." >&2; exit 1; }
	@{ [ -n "$$JAVA_HOME" ] && "$$JAVA_HOME/bin/java" -version >/dev/null 2>&1; } || java -version >/dev/null 2>&1 || { \
	  echo "error: 'java -version' failed. PySpark needs a Java runtime (17 or 21) on PATH or in JAVA_HOME;" >&2; \
	  echo "       e.g. 'apt-get install openjdk-17-jre-headless'." >&2; exit 1; }

$(PY): | check-tools
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) pyspark
	$(ONE_AT_A_TIME) $(PIP_INSTALL) $(EDITABLE) '.[test]'
	@touch $@

$(BENCH_STAMP): pyproject.toml constraints.txt $(STAMP)
	$(ONE_AT_A_TIME) $(PIP_INSTALL) $(EDITABLE) '.[test,bench]'
	@touch $@

$(LINT_STAMP): pyproject.toml constraints.txt $(STAMP)
	$(ONE_AT_A_TIME) $(PIP_INSTALL) $(EDITABLE) '.[test,lint]'
	@touch $@

$(RELEASE_STAMP): pyproject.toml constraints.txt $(STAMP)
	$(ONE_AT_A_TIME) $(PIP_INSTALL) $(EDITABLE) '.[test,release]'
	@touch $@

$(DOCS_STAMP): pyproject.toml constraints.txt $(STAMP)
	$(ONE_AT_A_TIME) $(PIP_INSTALL) $(EDITABLE) '.[test,docs]'
	@touch $@

# ruff and mypy on the package, configured in pyproject.toml, and the layout's import rules
# (tests/test_layout.py, docs/architecture.md). CI runs it.
lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check kafkasync_source kafkasync_dev benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest tests/test_layout.py -q -p no:cacheprovider

# The sdist and wheel build and pass twine check; the wheel, installed into a clean virtualenv,
# reads the embedded cluster through format("kafkasync") from outside the checkout (CI runs it).
release-check: $(RELEASE_STAMP)
	$(PY) scripts/release_check.py

# The docs site (docs/, mkdocs.yml) into site/; --strict fails on any link, anchor or image that
# does not resolve. The options reference is regenerated from the code first.
docs: $(DOCS_STAMP)
	$(PY) -c 'import sys; from kafkasync_source.config.option_docs import reference; sys.stdout.write(reference())' \
	  > docs/reference/options.md
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test: venv
	@echo "make test: skipping tests marked 'slow' (soak/long runs); run them with 'make test-slow'."
	$(PY) -m pytest tests -q -m "not slow" $(PYTEST_ARGS)

# make test while two busy processes hold both cores (issue 64): a test whose outcome depends on
# how fast the machine ran, rather than on what the code did, fails here first. Each busy process
# runs in a session of its own (setsid), as another job beside the suite on a CI runner does: Linux
# schedules sessions (autogroups) as equals and only the processes within one by their own share,
# so two busy processes in the suite's session would starve it as no neighbour job can. They are
# the target's own: killed when it ends, however it ends (and each stops by itself once the shell
# that started it is gone, should that shell be killed outright).
BUSY := import os, itertools; parent = os.getppid(); any(os.getppid() != parent for _ in itertools.count())
SESSION_OF_ITS_OWN := $(shell command -v setsid 2>/dev/null)
test-loaded: venv
	@pids=""; trap 'kill $$pids 2>/dev/null' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	for core in 1 2; do $(SESSION_OF_ITS_OWN) $(PYTHON) -c '$(BUSY)' & pids="$$pids $$!"; done; \
	echo "make test-loaded: make test beside two busy processes ($$pids), load average $$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"; \
	began=$$(date +%s); $(MAKE) --no-print-directory test; status=$$?; \
	echo "make test-loaded: make test exited $$status after $$(( $$(date +%s) - began )) s"; exit $$status

# What changes with the Python is the interpreter and what constraints.txt pins for it (PySpark
# 4.2.1, NumPy 2.2, PyArrow 25 on 3.10): CI runs this on the oldest and newest Python the README
# promises, each in a VENV of its own (make test-core PYTHON=python3.10 VENV=.venv-py3.10). It
# installs kafkasync there, runs every test that needs neither Spark nor a cluster (planner,
# options, event time and its property tests, offsets, client settings, Java stores, the layout),
# and one smoke through both: a stream with a checkpoint restarted, a batch read and an
# availableNow run on the embedded cluster, the source found by auto-discovery
# (scripts/pyspark_smoke.py, as make versions runs it). make test runs everything on 3.11; here
# each property test draws a quarter of its examples (tests/property_budget.py says why).
test-core: venv
	KAFKASYNC_EXAMPLES_SHARE=0.25 $(PY) -m pytest tests -q -m "not slow and not spark and not kafka and not registry" $(PYTEST_ARGS)
	$(PY) scripts/pyspark_smoke.py

# pytest exits 5 when it collects nothing: no test is marked slow yet, which is not a failure.
test-slow: venv
	$(PY) -m pytest tests -q -m slow $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "make test-slow: no test is marked slow."; [ $$rc -eq 5 ]; }

demo: venv
	$(PY) -m kafkasync_dev.demo

# The real-broker suite. Its broker: KAFKASYNC_BOOTSTRAP, else KAFKA_HOME, else the official
# Apache Kafka $(KAFKA_VERSION) release jars from Maven Central (resolved once into
# ~/.cache/kafkasync/, which needs mvn and Java 17+), else Docker (integration/conftest.py).
# Its Schema Registry: KAFKASYNC_SCHEMA_REGISTRY_URL, else Apicurio Registry from Maven Central
# on a Java 21+ (kafkasync_dev/testing/schema_registry.py), fetched here once.
# A 3.x release runs the subset marked `compat`. The 15 slowest tests are printed: CI time is
# budgeted, and the integration step is most of it.
KAFKA_VERSION ?= 4.3.1
integration: venv
	@if [ -z "$$KAFKASYNC_BOOTSTRAP$$KAFKA_HOME" ]; then \
	  $(PY) -m kafkasync_dev.testing.kafka_dist $(KAFKA_VERSION) >/dev/null || \
	  echo "make integration: no broker from Maven Central; it needs mvn and Java 17+ (see above)." >&2; fi
	@if [ -z "$$KAFKASYNC_SCHEMA_REGISTRY_URL" ]; then \
	  $(PY) -m kafkasync_dev.testing.schema_registry >/dev/null || \
	  echo "make integration: no Schema Registry (Apicurio from Maven Central); it needs mvn and Java 21+ (see above)." >&2; fi
	KAFKA_VERSION=$(KAFKA_VERSION) $(PY) -m pytest integration -rsfE --durations=15 $(if $(filter 3.%,$(KAFKA_VERSION)),-m compat) $(PYTEST_ARGS)

# The brokers' and the registry's jars from Maven Central, resolved once into the cache, so that
# the real-broker suites can run side by side without two mvn runs writing one local repository.
broker-jars: venv
	$(PY) -m kafkasync_dev.testing.kafka_dist 4.3.1 >/dev/null
	$(PY) -m kafkasync_dev.testing.kafka_dist 3.9.2 >/dev/null
	$(PY) -m kafkasync_dev.testing.schema_registry >/dev/null

# format("kafka") beside kafkasync: Spark's connector must match the running Spark, and Maven
# Central serves none for some releases (4.3.0), so this runs in a virtualenv of the newest
# PySpark whose connector is served, on a broker from Maven Central. With it, kafkasync's decoded
# columns beside from_avro, from_json and from_protobuf (spark-avro and spark-protobuf at the same
# version; the Protobuf comparison is skipped, saying so, where spark-protobuf cannot be had).
# Delta Lake's connector is built per Spark line too, and none is served for Spark 4.3: the
# Delta tests (integration/test_delta.py; make integration skips them on 4.3, saying why) run
# here, their jars (kafkasync_dev/testing/delta.py pins the release) resolved into the cache.
PARITY_PYSPARK ?= 4.2.0
PARITY_VENV    := .venv-pyspark$(PARITY_PYSPARK)
PARITY_STAMP   := $(PARITY_VENV)/.kafkasync-test.stamp
# The newest release of each older PySpark line kafkasync supports (pyproject: pyspark>=4.0).
SMOKE_PYSPARK  ?= 4.0.5 4.1.4 4.2.1

# A virtualenv of PySpark $(1) with kafkasync's extras $(2): constraints.txt, PySpark repinned.
define pyspark_venv
.venv-pyspark$(1)/.kafkasync-$(or $(2),base).stamp: pyproject.toml constraints.txt | check-tools
	$(PYTHON) -m venv .venv-pyspark$(1)
	sed 's/^pyspark==.*/pyspark==$(1)/' constraints.txt > .venv-pyspark$(1)/constraints.txt
	.venv-pyspark$(1)/bin/python -m pip install --disable-pip-version-check -q -c .venv-pyspark$(1)/constraints.txt pyspark
	$(ONE_AT_A_TIME) .venv-pyspark$(1)/bin/python -m pip install --disable-pip-version-check -q \
	  -c .venv-pyspark$(1)/constraints.txt $(EDITABLE) '.$(if $(2),[$(2)])'
	@touch $$@
endef
$(eval $(call pyspark_venv,$(PARITY_PYSPARK),test))
$(foreach version,$(filter-out $(PARITY_PYSPARK),$(SMOKE_PYSPARK)),$(eval $(call pyspark_venv,$(version))))
SMOKE_STAMPS := $(foreach version,$(SMOKE_PYSPARK),.venv-pyspark$(version)/.kafkasync-$(if $(filter $(version),$(PARITY_PYSPARK)),test,base).stamp)

# A quick smoke (stream, restart from its checkpoint, batch read, availableNow) on each older
# PySpark line, each in its own virtualenv; make test runs the full suite on constraints.txt's.
versions: $(SMOKE_STAMPS)
	@status=0; for version in $(SMOKE_PYSPARK); do \
	  log=$${TMPDIR:-/tmp}/kafkasync-smoke-$$version.log; \
	  .venv-pyspark$$version/bin/python scripts/pyspark_smoke.py >$$log 2>&1 || status=1; \
	  grep '^versions:' $$log || { status=1; echo "versions: PySpark $$version: no result, see $$log"; }; \
	done; exit $$status

# The virtualenvs alone, nothing run in them: CI builds them ahead, two at a time (.ci/run), as
# pip spends most of its time on one core (a PySpark sdist built and unpacked).
# venv-extras installs every extra in one pip run (one resolution instead of four) and stamps
# each, so that the targets needing one find it installed.
EXTRAS_STAMP := $(VENV)/.kafkasync-extras.stamp
$(EXTRAS_STAMP): pyproject.toml constraints.txt $(STAMP)
	$(ONE_AT_A_TIME) $(PIP_INSTALL) $(EDITABLE) '.[test,bench,lint,release,docs]'
	@touch $(LINT_STAMP) $(DOCS_STAMP) $(RELEASE_STAMP) $(BENCH_STAMP) $@
venv-extras: $(EXTRAS_STAMP)
versions-venvs: $(SMOKE_STAMPS)
parity-venv: $(PARITY_STAMP)

parity: $(PARITY_STAMP)
	@$(PARITY_VENV)/bin/python -c 'import pyspark; print("make parity: PySpark", pyspark.__version__, "beside Spark'"'"'s own format(\"kafka\") at the same version")'
	KAFKASYNC_REQUIRE_FORMAT_KAFKA=1 KAFKASYNC_REQUIRE_DELTA=1 KAFKA_VERSION=$(KAFKA_VERSION) $(PARITY_VENV)/bin/python -m pytest \
	  integration/test_format_kafka_parity.py integration/test_format_decoders_parity.py integration/test_delta.py -rsfE $(PYTEST_ARGS)

# The demo on Apache Kafka from Maven Central with format("kafka") itself as the third run, in
# make parity's virtualenv (Spark's connector must match the running Spark; see parity).
demo-real: $(PARITY_STAMP)
	$(PARITY_VENV)/bin/python -m kafkasync_dev.demo --real

# Every benchmark, then format("kafka") beside kafkasync in make parity's virtualenv (the same Spark on
# both sides: Maven Central serves no connector for some releases), into results.json and a picture.
bench: $(BENCH_STAMP) $(PARITY_STAMP)
	$(PY) -m benchmarks.run
	$(PARITY_VENV)/bin/python -m benchmarks.side_by_side --write

# Every benchmark at tiny sizes, asserting each produced its figures. Its two halves, the
# benchmarks in kafkasync's virtualenv and the side by side in make parity's, each start a broker
# of their own and assert no figure's size. CI runs the first (bench-smoke-core, 3.7 minutes); the
# side by side starts eight Sparks of its own (11.6 minutes of a 2-core machine) and is run
# before a make bench.
bench-smoke: bench-smoke-core bench-smoke-side-by-side
bench-smoke-core: $(BENCH_STAMP)
	$(PY) -m benchmarks.smoke
bench-smoke-side-by-side: $(BENCH_STAMP) $(PARITY_STAMP)
	$(PARITY_VENV)/bin/python -m benchmarks.smoke --side-by-side

# An hour's live stream (10,000 records/s, 8 partitions) on a real broker: the planning runner's
# and the workers' RSS every 30 s, each trigger's latestOffset time, 0 lost and 0 duplicated
# (benchmarks/soak.py; not in CI). SOAK_ARGS picks another variant, e.g.
# SOAK_ARGS="--variant json-ordered --minutes 15" or "--partitions 4096 --rate 1000".
SOAK_ARGS ?=
bench-soak: $(BENCH_STAMP)
	$(PY) -m benchmarks.soak $(SOAK_ARGS)

# Generated files only; `distclean` also removes the virtualenv.
clean:
	rm -rf build dist site *.egg-info .pytest_cache .hypothesis spark-warehouse metastore_db derby.log
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .venv-pyspark*
