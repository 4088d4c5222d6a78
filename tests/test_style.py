"""The code stays ruff-clean and formatted, and its modules import no cycle (one-way data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_and_format_are_clean() -> None:
    for argv in (["check", "."], ["format", "--check", "autotune", "tests", "bench"]):
        out = subprocess.run([sys.executable, "-m", "ruff", *argv], cwd=ROOT,
                             capture_output=True, text=True)  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def _imports(package: Path) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports (at any depth)."""
    import ast

    names = {
        ".".join(f.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): f
        for f in package.rglob("*.py")
    }
    edges: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        for node in ast.walk(ast.parse(path.read_text())):
            found = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in found:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                inside = target in (module, package.name) or module.startswith(target + ".")
                if target and not inside:
                    edges[module].add(target)
    return edges


def test_no_module_imports_one_that_imports_it_back() -> None:
    edges = _imports(ROOT / "autotune")
    assert len(edges) > 40

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges[todo.pop()] - seen:
                if nxt == goal:
                    return True
                seen.add(nxt)
                todo.append(nxt)
        return False

    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if reaches(b, a))
    assert cycles == []
    edges["autotune.storage.records"].add("autotune.search.step")  # the check bites
    assert reaches("autotune.search.step", "autotune.search.step")


STAGES = ("strategy", "starts", "trial", "choice", "search", "ship")  # the flow, in order
BASICS = (
    "workload",
    "traffic",
    "device",
    "environment",
    "errors",
    "fields",
    "usercode",
    "variables",
    "start_kinds",
)


def test_imports_point_down_the_flow() -> None:
    """A stage imports only earlier stages (and the basics); a basic imports no stage; no
    stage imports the front ends (cli, service, dashboard)."""
    edges = _imports(ROOT / "autotune")

    def part(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    wrong = []
    for a, targets in edges.items():
        for b in targets:
            pa, pb = part(a), part(b)
            if pa in STAGES and pb in STAGES and STAGES.index(pb) > STAGES.index(pa):
                wrong.append(f"{a} -> {b}")
            if pa in BASICS and pb and pb not in BASICS:
                wrong.append(f"{a} -> {b}")
            if pa in (*STAGES, "catalog") and pb in ("cli", "service", "dashboard"):
                wrong.append(f"{a} -> {b}")
    assert wrong == []
    assert len([p for p in (ROOT / "autotune").glob("*.py") if p.name != "__init__.py"]) <= 9
    assert all((ROOT / "autotune" / s / "__init__.py").is_file() for s in STAGES)
