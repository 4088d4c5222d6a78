"""Environment variables: read in autotune.variables alone, at call time, and refused in one
line when malformed."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from autotune import variables
from autotune.coordination import Pulse
from autotune.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


class Answers:
    def beat(self) -> int:
        return 0


def test_a_changed_value_is_seen_by_the_next_call(monkeypatch) -> None:
    pulse = Pulse(Answers())
    pulse.since = time.monotonic() - 3  # reached the database 3 s ago
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "2")
    assert pulse.steady() and variables.reap_s() == 5.0  # max(heartbeat 5, grace / 3)
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "10")
    assert not pulse.steady()
    monkeypatch.setenv("AUTOTUNE_STUDIES", "/srv/tuning")
    assert variables.default_storage() == "sqlite:////srv/tuning/autotune.db"


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "nan", "inf"])
def test_a_malformed_number_is_one_line(monkeypatch, raw: str) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", raw)
    with pytest.raises(ConfigError, match=r"^\$AUTOTUNE_HEARTBEAT_S=.*positive number"):
        variables.heartbeat_s()


def test_no_other_module_reads_autotune_variables() -> None:
    reads = re.compile(r"""environ(\.get)?\s*[\(\[]\s*["']AUTOTUNE_""")
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "autotune").rglob("*.py")
             if reads.search(p.read_text()) and p.name != "variables.py"]  # fmt: skip
    assert found == []
    assert reads.search('os.environ.get("AUTOTUNE_GRACE_S", "30")')  # the check bites


def test_preload_names_modules_from_its_table_and_refuses_any_other(monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PRELOAD", "compilers, transformers")
    assert variables.preload() == [*variables.PRELOADS["compilers"],
                                   *variables.PRELOADS["transformers"]]  # fmt: skip
    monkeypatch.setenv("AUTOTUNE_PRELOAD", "")
    assert variables.preload() == []
    for word in ("os", "compilers,subprocess", "torch._inductor.compile_fx"):
        monkeypatch.setenv("AUTOTUNE_PRELOAD", word)  # a module's name is not a word
        with pytest.raises(ConfigError, match="AUTOTUNE_PRELOAD"):
            variables.preload()


def test_the_preloaded_modules_exist_in_this_torch_and_transformers() -> None:
    import importlib.util

    for name in (m for ms in variables.PRELOADS.values() for m in ms):
        assert importlib.util.find_spec(name) is not None, name  # the fork server skips misses
