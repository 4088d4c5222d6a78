"""The code stays ruff-clean and formatted, its modules import no cycle (one-way data), and a
stored spec is read in one place."""

from __future__ import annotations

import ast
import re
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
    """Each module of the package and the package's modules it imports (at any depth, inside a
    function too) or runs by name (``python -m autotune.job.spawned``)."""
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
            elif isinstance(node, ast.Constant) and node.value in names:  # a module run by name
                found = [node.value]
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


STAGES = ("strategy", "starts", "trial", "choice", "search", "ship", "job")  # the flow, in order
BASICS = (
    "errors",
    "variables",
    "fields",
    "usercode",
    "device",
    "environment",
    "traffic",
    "arrivals",
    "start_kinds",
    "workload",
)
# Every package and top-level module, bottom floor first: a module imports only its own floor
# and the floors below. "autotune" is the package's own __init__, the public API.
FLOORS = (
    BASICS,
    ("storage",),
    ("coordination",),
    ("catalog",),
    *((stage,) for stage in STAGES),
    ("autotune",),
    ("dashboard",),
    ("service",),
    ("cli",),
)


def _floor(module: str) -> int:
    """The floor of a module's package or top-level module (-1: on none)."""
    part = module.split(".")[1] if "." in module else module
    return next((n for n, floor in enumerate(FLOORS) if part in floor), -1)


def _back_arrows(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a in edges for b in edges[a] if _floor(b) > _floor(a))


def test_imports_point_down_the_floors() -> None:
    """Every module sits on a floor (basics, storage, coordination, catalog, the stages in
    their order, the public API, then the front ends dashboard, service and cli) and imports
    nothing from a floor above its own: no import, at run time or under TYPE_CHECKING, and no
    ``python -m`` of a module, points back up."""
    edges = _imports(ROOT / "autotune")
    assert [m for m in edges if _floor(m) < 0] == []
    assert _back_arrows(edges) == []
    edges["autotune.coordination.claims"].add("autotune.search.spec")  # the check bites
    edges["autotune.ship.export"].add("autotune.job")
    edges["autotune.workload"].add("autotune.starts.later")
    assert len(_back_arrows(edges)) == 3
    assert len([p for p in (ROOT / "autotune").glob("*.py") if p.name != "__init__.py"]) <= 10
    for number, stage in enumerate(STAGES, 1):  # each stage's docstring numbers it in the flow
        text = (ROOT / "autotune" / stage / "__init__.py").read_text()
        assert text.startswith(f'"""Stage {number}, '), stage


def test_a_run_time_import_and_a_module_run_by_name_are_arrows(tmp_path: Path) -> None:
    """An import inside a function, and ``python -m`` of a module, are arrows too."""
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "top.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    import pkg.top\n")
    (package / "low" / "b.py").write_text("ARGV = ['python', '-m', 'pkg.top']\n")
    edges = _imports(package)
    assert edges["pkg.low.a"] == edges["pkg.low.b"] == {"pkg.top"}


MAX_LINES = 330


def long_modules(root: Path) -> list[str]:
    """Each module under ``root`` longer than :data:`MAX_LINES` lines, with its length."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if (n := len(path.read_text().splitlines())) > MAX_LINES:
            found.append(f"{path.relative_to(root.parent)}: {n} lines")
    return found


def test_no_module_is_over_330_lines(tmp_path: Path) -> None:
    """A module holds one concept: one that grows past 330 lines is split by concept, the part
    moved into a module of its own, named after it."""
    assert long_modules(ROOT / "autotune") == []
    added = tmp_path / "autotune" / "sub" / "long.py"  # the check bites
    added.parent.mkdir(parents=True)
    added.write_text("x = 1\n" * (MAX_LINES + 1))
    (added.parent / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path / "autotune") == [f"autotune/sub/long.py: {MAX_LINES + 1} lines"]


SPEC_READERS = (
    "autotune/search/spec.py",  # StudySpec: the one reader of a stored spec and a spec file
    "autotune/service/intake.py",  # a request's tables, checked before StudySpec reads them
)
SPECLIKE = re.compile(r"(\w+_)?spec(_\w+)?|raw")  # spec, stored_spec, spec_json, raw, ...
SOURCES = ("read_toml", "check_tables")  # a spec file's (or a request's) tables
KEEPS = ("get", "to_dict", "items", "values", "copy")  # what of a spec still holds its JSON


class SpecReads:
    """One module's syntax tree: which expressions hold a spec's JSON or a spec file's tables
    (a name or attribute :data:`SPECLIKE` names, a call of :data:`SOURCES`, a :data:`KEEPS`
    call, ``[...]`` or comprehension of one, or a name bound to one), and where they are read
    by hand (``.get`` or ``[...]``)."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree, self.bound = tree, set[str]()
        for _ in range(3):  # a name bound to a name bound to ... one
            for node in ast.walk(tree):
                value = getattr(node, "value", None)
                targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and (
                    value is not None and self.speclike(value)
                ):
                    self.bound.update(t.id for t in targets if isinstance(t, ast.Name))

    def speclike(self, e: ast.expr) -> bool:
        if isinstance(e, ast.Attribute):
            return bool(SPECLIKE.fullmatch(e.attr))
        if isinstance(e, ast.Name):
            return bool(SPECLIKE.fullmatch(e.id)) or e.id in self.bound
        if isinstance(e, ast.Call):
            f = e.func
            called = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            kept = called in KEEPS and isinstance(f, ast.Attribute) and self.speclike(f.value)
            return called in SOURCES or kept
        if isinstance(e, (ast.Subscript, ast.NamedExpr)):
            return self.speclike(e.value)
        if isinstance(e, (ast.DictComp, ast.ListComp, ast.GeneratorExp)):
            return any(self.speclike(g.iter) for g in e.generators)
        return isinstance(e, ast.BoolOp) and any(self.speclike(v) for v in e.values)

    def lines(self) -> set[int]:
        found = set()
        for node in ast.walk(self.tree):
            get = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == "get" and self.speclike(node.func.value))  # fmt: skip
            item = (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                    and self.speclike(node.value))  # fmt: skip
            if get or item:
                found.add(node.lineno)  # type: ignore[attr-defined]
        return found


def raw_spec_reads(root: Path) -> list[str]:
    """Each ``.get`` or ``[...]`` read of a spec's JSON or a spec file's TOML tables by hand in
    ``root``'s modules outside :data:`SPEC_READERS`, whatever the variable's name
    (:class:`SpecReads`)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = str(path.relative_to(root.parent))
        if name not in SPEC_READERS:
            lines = SpecReads(ast.parse(path.read_text())).lines()
            found += [f"{name}:{n}" for n in sorted(lines)]
    return found


def test_a_stored_spec_is_read_in_one_place(tmp_path: Path) -> None:
    """Every reader of a study's spec goes through StudySpec's typed values (a stored one read
    back by ``StudySpec.from_dict``: its defaults and its errors written once), and every
    reader of a spec file through search/spec.py, never ``spec.get("workload") or {}`` by
    hand, whatever the variable is called."""
    assert raw_spec_reads(ROOT / "autotune") == []
    assert all((ROOT / reader).is_file() for reader in SPEC_READERS)
    added = tmp_path / "autotune" / "reader.py"  # the check bites
    added.parent.mkdir()
    added.write_text(
        'kind = (study.spec.get("workload") or {}).get("kind", "inference")\n'  # 1
        'budget = row.spec["trials"]\nraw = study.spec.raw\n'  # 2
        'tables = read_toml(path)\ndtype = tables.get("workload")\n'  # 5
        'fine = {"a": 1}.get("a")\nok = os.environ.get("HOME")\n'
        'asked = read_toml(args.space).get("workload", {}).get("dtype")\n'  # 8
        'seed = record.spec_json["settings"]\ntrials = stored_spec.get("trials")\n'  # 9, 10
        "def f(spec):\n    return spec.to_dict()['policy']\n"  # 12
        'w = (t := check_tables(data, "request"))["workload"]\nk = w.get("kind")\n'  # 13, 14
        'names = {n: v for n, v in read_toml(p).items()}\nm = names.get("model")\n'  # 16
    )  # fmt: skip
    found = [int(n.rpartition(":")[2]) for n in raw_spec_reads(tmp_path / "autotune")]
    assert found == [1, 2, 5, 8, 9, 10, 12, 13, 14, 16]


def test_the_raw_read_rule_catches_a_spec_file_read_by_hand() -> None:
    """The read ``autotune search`` once made of a spec file's dtype, named by no variable."""
    code = 'dtype = read_toml(args.space).get("workload", {}).get("dtype")\n'
    assert SpecReads(ast.parse(code)).lines() == {1}
    assert SpecReads(ast.parse('dtype = flags.get("dtype")\n')).lines() == set()


def test_test_folders_mirror_the_packages() -> None:
    """A package's tests are in the folder named after it (``tests/search/`` for
    ``autotune/search/``); the basics' in ``tests/basics/``, the bench's in ``tests/bench/``;
    only the project-wide tests (style, docs, README, the public API, the walk of the code by
    tools/walk.py) stay at the top."""
    packages = {p.parent.name for p in (ROOT / "autotune").glob("*/__init__.py")}
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/__init__.py")}
    assert folders == packages | {"basics", "bench"}
    top = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    project_wide = ("test_api.py", "test_docs.py", "test_readme.py", "test_style.py")
    assert top == {*project_wide, "test_walk.py"}
    assert all(list((ROOT / "tests" / f).glob("test_*.py")) for f in folders)


# Tests named for what they check across modules rather than after one module, and why.
CROSSING = {
    "catalog/test_checkpoint.py": "real weights through catalog, hf and random_weights",
    "choice/test_lifetime.py": "the lifetime policies across objectives, selection, verdict",
    "cli/test_safety.py": "no code from data, through every command",
    "job/test_gpu_queue.py": "queue workers on GPUs (device, queue, worker)",
    "job/test_gpu_workers.py": "search --workers on GPUs (device, local, spawned)",
    "job/test_workers.py": "local workers end to end (local, spawned, coordination)",
    "search/test_budget_stop.py": "the time budget kept (plan, loop, stops)",
    "search/test_study.py": "a whole study (open, step, loop, state)",
    "ship/test_formats_as_they_are.py": "exports taken by Accelerate and transformers as they are",
    "storage/test_postgres.py": "the store on PostgreSQL",
    "strategy/test_serving.py": "a traffic's strategies (shapes, padding, granularity)",
    "trial/test_failure_reason.py": "why a child failed, in one line (child, process)",
    "trial/test_failures.py": "a child killed, frozen or out of memory (process, parent)",
    "trial/test_served_as_a_server.py": "the first pass against a server's own loop",
}


def misnamed(tests: Path, package: Path) -> list[str]:
    """Test files under ``tests`` named after no module of ``package``: ``tests/X/test_Y.py``
    is ``autotune/X/**/Y.py`` (or the package X itself, ``tests/X/test_X.py``), unless it is
    in :data:`CROSSING`; the basics', the bench's and the project-wide tests are their own."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        folder, name = rel.parent, path.stem.removeprefix("test_")
        if str(folder) in (".", "basics", "bench") or str(rel) in CROSSING:
            continue
        home = package / folder
        if name != str(folder) and not any(home.rglob(f"{name}.py")):
            found.append(str(rel))
    return found


def test_a_test_file_is_named_after_the_module_it_tests(tmp_path: Path) -> None:
    assert misnamed(ROOT / "tests", ROOT / "autotune") == []
    assert all((ROOT / "tests" / name).is_file() for name in CROSSING)
    (tmp_path / "autotune" / "search").mkdir(parents=True)  # the check bites
    (tmp_path / "autotune" / "search" / "plan.py").write_text("")
    (tmp_path / "tests" / "search").mkdir(parents=True)
    for name in ("test_plan.py", "test_search.py", "test_planner.py"):
        (tmp_path / "tests" / "search" / name).write_text("")
    assert misnamed(tmp_path / "tests", tmp_path / "autotune") == ["search/test_planner.py"]
