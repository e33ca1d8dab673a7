"""The package tree says where code runs, and these rules keep it so (make lint runs this file;
docs/architecture.md draws the tree).

* ``planning/`` is pure: the standard library, numpy and the event-time codes, nothing of Kafka
  or Spark, no client of the driver's — so every decision is tested without a broker, as Kafka
  Streams keeps ``PartitionGroup`` apart from the clients that feed it.
* ``event_time/`` is the one seam the driver and the executors share: it imports neither Kafka
  nor Spark nor any other part of kafkasync, so both sides run the same code on the same bytes.
* ``driver/`` and ``executor/`` never import each other: what both ask of Kafka lives in
  ``kafka/``, so no driver thread or client reaches a task and no executor code the planner.
* What a query runs never imports the test support or the demo (``kafkasync_dev``).
* ``benchmarks/``: one harness (``benchmarks/harness/``) that every measurement imports and that
  imports no measurement; no import circle among the benchmarks; no private name (``_x``) of one
  benchmark file used in another.
* No module of the package, the test support or the benchmarks is over :data:`MAX_LINES` lines,
  but those :data:`LONG_MODULES` names, each with its reason (issue 63).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kafkasync_source"
RUNTIME_PACKAGES = ("config", "driver", "enrich", "event_time", "executor", "formats", "kafka", "metrics", "planning",
                    "spark")


def imports_of(package: str) -> dict[str, set[str]]:
    """``{module file: the modules it imports}`` for every module of ``kafkasync_source.<package>``
    (imports inside functions too: they run where the module runs)."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / package).rglob("*.py")):
        modules: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module)
        found[str(path.relative_to(PACKAGE.parent))] = modules
    return found


def outside(modules: set[str], allowed: tuple[str, ...]) -> list[str]:
    """The modules that are not the standard library and not under one of ``allowed``."""
    return sorted(module for module in modules
                  if module.split(".")[0] not in sys.stdlib_module_names
                  and not any(module == prefix or module.startswith(prefix + ".") for prefix in allowed))


@pytest.mark.parametrize("module, modules", imports_of("planning").items())
def test_planning_is_pure(module, modules):
    assert outside(modules, ("numpy", "kafkasync_source.planning", "kafkasync_source.event_time")) == [], module


@pytest.mark.parametrize("module, modules", imports_of("event_time").items())
def test_the_event_time_seam_imports_nothing_of_kafka_spark_or_the_rest(module, modules):
    assert outside(modules, ("msgspec", "kafkasync_source.event_time")) == [], module


@pytest.mark.parametrize("module, modules", imports_of("formats").items())
def test_the_formats_import_their_decoders_and_the_seam_only(module, modules):
    """``formats/`` runs where the seam runs (driver fetch path and executors): the registry client
    and the decoders, the seam's conversions and Spark's types, nothing of the driver, the
    executors or the planner."""
    assert outside(modules, ("msgspec", "numpy", "fastavro", "google.protobuf", "confluent_kafka.schema_registry",
                             "pyarrow", "pyspark.sql.types", "kafkasync_source.event_time",
                             "kafkasync_source.formats")) == [], module


@pytest.mark.parametrize("side, other", [("driver", "executor"), ("executor", "driver")])
def test_the_driver_and_the_executors_do_not_import_each_other(side, other):
    crossing = {module: sorted(m for m in modules if m.startswith(f"kafkasync_source.{other}"))
                for module, modules in imports_of(side).items()}
    assert {module: found for module, found in crossing.items() if found} == {}


@pytest.mark.parametrize("package", RUNTIME_PACKAGES)
def test_what_a_query_runs_never_imports_the_test_support(package):
    offending = {module: sorted(m for m in modules if m.startswith(("kafkasync_dev.testing",
                                                                     "kafkasync_dev.demo")))
                 for module, modules in imports_of(package).items()}
    assert {module: found for module, found in offending.items() if found} == {}


def test_the_rules_see_what_they_judge():
    """A rule over an empty import list would pass whatever the tree: each package is found and
    read, and the checker flags a Kafka import where one stands."""
    assert all(imports_of(package) for package in RUNTIME_PACKAGES)
    assert "confluent_kafka" in set().union(*imports_of("driver").values())
    assert outside({"confluent_kafka", "numpy", "json"}, ("numpy",)) == ["confluent_kafka"]


# -- benchmarks/: a harness and measurements --------------------------------------------------------

def benchmark_imports() -> dict[str, list[tuple[str, list[str]]]]:
    """``{benchmarks module: [(benchmarks module it imports, the names it takes from it)]}``, every
    import counted (inside functions too); ``import benchmarks.x`` takes no name, and each use of
    an attribute of a module imported so (``x._y``) counts as taking that name."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        imports: list[tuple[str, list[str]]] = []
        aliases: dict[str, str] = {}
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks"):
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    if (ROOT / Path(*submodule.split("."))).with_suffix(".py").exists():
                        imports.append((submodule, []))  # from benchmarks import a_module
                        aliases[alias.asname or alias.name] = submodule
                    else:
                        imports.append((node.module, [alias.name]))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("benchmarks."):
                        imports.append((alias.name, []))
                        aliases[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                imports.append((aliases[node.value.id], [node.attr]))
        found[name] = imports
    return found


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (``module: the modules it imports``), or ``[]``."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module], path[len(path):] = "open", [module]
        for imported in sorted(graph.get(module, set()) - {module}):
            if state.get(imported) == "open":
                return path[path.index(imported):] + [imported]
            if imported not in state and (found := visit(imported)):
                return found
        state[module] = "done"
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_the_benchmark_harness_imports_no_measurement():
    crossing = {module: sorted(m for m, _ in imports if not m.startswith("benchmarks.harness"))
                for module, imports in benchmark_imports().items() if module.startswith("benchmarks.harness")}
    assert {module: found for module, found in crossing.items() if found} == {}


def test_the_benchmarks_import_one_another_without_a_circle():
    graph = {module: {m for m, _ in imports} for module, imports in benchmark_imports().items()}
    assert circle(graph) == []


def test_no_private_name_of_a_benchmark_file_is_used_in_another():
    crossing = {module: sorted(f"{m}.{name}" for m, names in imports if m != module for name in names
                               if name.startswith("_") and not name.startswith("__"))
                for module, imports in benchmark_imports().items()}
    assert {module: found for module, found in crossing.items() if found} == {}


def test_the_benchmark_rules_see_what_they_judge():
    """The import reader finds the harness behind a measurement, a private name taken from a
    module, and the circle checker finds a circle where one stands."""
    imports = benchmark_imports()
    assert ("benchmarks.harness.spark", ["session"]) in imports["benchmarks.many_partitions"]
    assert any(m == "benchmarks.harness.samplers" for m, _ in imports["benchmarks.harness.queries"])
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set(), "d": {"d"}}) == []


# -- no module over 650 lines, but those named ------------------------------------------------------

MAX_LINES = 650
LONG_MODULES: set[str] = set()
"""The modules over :data:`MAX_LINES` lines, each with why; the lead removes an entry when its
split lands (the test below fails on an entry that no longer applies)."""


def module_lines() -> dict[str, int]:
    return {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
            for tree in ("kafkasync_source", "kafkasync_dev", "benchmarks") for path in (ROOT / tree).rglob("*.py")}


def test_no_module_is_over_650_lines_but_those_named():
    """A module this long holds more than one concern: split it by concern, or name it in
    :data:`LONG_MODULES` saying why (tests are grouped by the behaviour they check, not held to it)."""
    lines = module_lines()
    assert {path: count for path, count in lines.items() if count > MAX_LINES and path not in LONG_MODULES} == {}
    assert {path: lines.get(path, "gone") for path in LONG_MODULES if lines.get(path, 0) <= MAX_LINES} == {}, (
        "these modules are split or gone: remove them from LONG_MODULES")
