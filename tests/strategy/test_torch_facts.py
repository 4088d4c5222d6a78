"""What the running torch offers a space, kept per torch build so that a process that parses a
spec imports neither Dynamo nor Inductor; a kept file that is not that is read again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.strategy import Space, Strategy, torch_facts

ROOT = str(Path(__file__).resolve().parents[2])
# In a fresh process: the default space, checked and listed, and the modes it read; whether
# Dynamo or Inductor came in with them; then the options an Inductor compile passes to torch.
PROBE = """
import json, sys
from autotune.strategy import Space, Strategy, torch_facts
space = Space.default("cpu")
space.validate("cpu")
space = space.to_dict()
modes = torch_facts.inductor()[0]
imported = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
compiled = Strategy.create("full", "inductor").compile_kwargs()["options"]
print(json.dumps({"space": space, "modes": modes, "imported": imported, "compiled": compiled}))
"""


def _probe(cache: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_process_reads_the_kept_facts_without_importing_dynamo_and_a_compile_reads_torch(
    tmp_path: Path,
) -> None:
    first = _probe(tmp_path)  # nothing kept: read from torch, and kept
    [path] = (tmp_path / "autotune" / "torch").glob("*.json")
    assert path.name == f"{torch_facts.key()}.json"
    live = torch_facts.live()  # this process imported both: these are torch's own
    assert torch_facts.TorchFacts.from_dict(json.loads(path.read_text())) == live
    assert first["imported"] == ["torch._dynamo", "torch._inductor"]  # it read them from torch
    assert first["space"] == Space.default("cpu").to_dict() and first["modes"] == live.modes
    # a well-formed record that says otherwise: the space believes it, a compile reads torch
    record = live.to_dict()
    said = {**record, "modes": {**record["modes"], "default": {"freezing": True}}}
    path.write_text(json.dumps(said))
    second = _probe(tmp_path)
    assert second["imported"] == []  # it read the kept record, not torch
    assert second["modes"]["default"] == {"freezing": True}
    assert second["space"] == first["space"]
    assert first["compiled"] == second["compiled"] == live.modes["default"] == {}


def test_a_kept_file_that_is_not_facts_is_read_again_from_torch(tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    live = torch_facts.live()
    assert torch_facts.kept(path) == live and path.is_file()  # nothing kept: torch's, kept
    # a path among the values: not autotune's record; it is read again from torch and kept
    path.write_text(json.dumps({**live.to_dict(), "modes": {"default": {"cpp.cxx": "/evil"}}}))
    assert torch_facts.kept(path) == live and "evil" not in path.read_text()
    path.write_text("{not json")
    assert torch_facts.kept(path) == live
    said = {**live.to_dict(), "backends": ["eager"]}  # well formed: believed
    path.write_text(json.dumps(said))
    assert torch_facts.kept(path).backends == ("eager",)
    blocked = tmp_path / "blocked.json"  # where the record cannot go: torch's, and no litter
    (blocked / "inside").mkdir(parents=True)
    assert torch_facts.kept(blocked) == live
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked.json", "facts.json"]


@pytest.mark.parametrize(
    "data",
    [
        {"modes": {"default": {"cpp.cxx": "g++"}}, "options": ["cpp.cxx"], "backends": []},
        {"modes": {"default": {"freezing": True}}, "options": [], "backends": []},
        {"modes": {}, "options": ["x; rm -rf"], "backends": []},
        {"modes": {}, "options": [], "backends": "inductor"},
        {"modes": {}, "options": []},
    ],
)
def test_only_names_and_scalar_options_parse(data: dict) -> None:
    with pytest.raises((ValueError, KeyError)):
        torch_facts.TorchFacts.from_dict(data)
    good = {"modes": {"lite": {"freezing": True}}, "options": ["freezing"], "backends": ["eager"]}
    assert torch_facts.TorchFacts.from_dict(good).modes == {"lite": {"freezing": True}}


def test_an_inductor_compile_passes_its_mode_s_options() -> None:
    kwargs = Strategy.create("full", "inductor", "max-autotune-no-cudagraphs").compile_kwargs()
    assert kwargs["options"] == torch_facts.live().modes["max-autotune-no-cudagraphs"]
    assert "options" not in Strategy.create("full", "aot_eager").compile_kwargs()
