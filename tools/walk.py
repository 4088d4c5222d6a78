"""Walk the code from ``autotune.cli.search.cmd_search``: how far a reader travels to follow
``autotune search``, to compare before and after a refactoring. Purely static: a checkout's
``autotune/**/*.py`` are parsed with :mod:`ast`, nothing of autotune is imported.

The call graph is over autotune's own functions and methods (a nested function or lambda is part
of the function around it: its calls are that function's). A call is resolved through:

- the module's own functions and classes, its imports at module level (under ``if
  TYPE_CHECKING`` too) and inside the calling function (lazy): ``from autotune.x import f``,
  ``from autotune import x`` then ``x.f()``, ``import autotune.x as y``, ``import autotune.x``
  then ``autotune.x.f()``; a name a package re-exports is followed to its home;
- ``Class.method``, ``cls.method``, ``self.method`` (looked up through the class's autotune
  bases, in order) and ``super().method`` (the bases after the class);
- ``Class(...)``: to the ``__init__`` and ``__post_init__`` it defines or inherits;
- ``x.method()`` where ``x`` is a local whose last assignment in the function is ``x = <call>``
  of a resolved constructor, or of a function whose return annotation names an autotune class
  (``X``, ``"X"``, ``X | None``; ``Self``: the class it was called on).

Any other call (``self.store.save()``, a parameter's method, a builtin, a library) is skipped.
The walk is depth first from ``cmd_search``, a function's calls in the order they appear in its
source (line, column), each function visited once.

- a *stay* is one function visited: stays = functions reached (``cmd_search`` included);
- a *room* is a module: rooms = distinct modules of the functions reached;
- a *climb* is an edge of the walk's tree (the call that first visits a function) from a package
  later in :data:`FLOW` to an earlier one; a call within a package (or between two top-level
  modules) is none;
- a *return* is a step of the visiting order into a room already left: in the visited
  functions' modules, consecutive repeats collapsed, each entry seen earlier counts once.

The time budget's trail: the files under ``autotune/`` that mention ``time_budget`` or
``time_budget_s`` as a word (in code, a docstring or a comment).

``python tools/walk.py [ROOT] [--list]``: ROOT a checkout (default, the one holding this tool).
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

START = "autotune.cli.search:cmd_search"
# The package flow, front end first; "" is the top-level modules (autotune/*.py), last. A
# package not named here comes after them all.
FLOW = ("cli", "job", "search", "choice", "trial", "strategy", "catalog", "starts", "ship",
        "service", "dashboard", "storage", "coordination", "")  # fmt: skip
BUDGET = re.compile(r"\btime_budget(_s)?\b")

Entity = tuple[str, str]  # (kind, key): mod, func, class, inst (of a class), super (of a class)
Def = ast.FunctionDef | ast.AsyncFunctionDef
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class Code:
    """A checkout's autotune, parsed: functions (``module:Qual.name``: module, def, class) and
    classes (``module:Qual``), each module's names (a def, or an import as an alias naming
    ``module`` or ``module:name``), the packages."""

    funcs: dict[str, tuple[str, Def, str | None]] = field(default_factory=dict)
    classes: dict[str, tuple[str, ast.ClassDef]] = field(default_factory=dict)
    scopes: dict[str, dict[str, ast.AST]] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, root: Path) -> Code:
        code = cls()
        for path in sorted((root / "autotune").rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            if path.name == "__init__.py":
                code.packages.add(module)
            code.scopes[module] = scope = {}
            for node in _statements(ast.parse(path.read_text()).body):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    scope.update(_binds(node, module, module in code.packages))
                elif isinstance(node, DEFS):
                    code.add(module, node, node.name, None)
                    scope[node.name] = node
        return code

    def add(self, module: str, node: ast.stmt, qual: str, owner: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            self.classes[f"{module}:{qual}"] = (module, node)
            for item in node.body:
                if isinstance(item, DEFS):
                    self.add(module, item, f"{qual}.{item.name}", f"{module}:{qual}")
        elif isinstance(node, Def):
            self.funcs[f"{module}:{qual}"] = (module, node, owner)

    def name(self, module: str, name: str, depth: int = 0) -> Entity | None:
        """What ``name`` is in ``module``: its function or class, what it imports as that
        name (followed to its home), or its submodule."""
        node = self.scopes.get(module, {}).get(name)
        if isinstance(node, ast.ClassDef):
            return ("class", f"{module}:{name}")
        if isinstance(node, Def):
            return ("func", f"{module}:{name}")
        if isinstance(node, ast.alias) and depth < 20:
            return self.imported(node, depth + 1)
        return ("mod", f"{module}.{name}") if f"{module}.{name}" in self.scopes else None

    def imported(self, alias: ast.alias, depth: int = 0) -> Entity | None:
        module, _, name = alias.name.partition(":")
        if name:
            return self.name(module, name, depth)
        return ("mod", module) if module in self.scopes else None

    def method(self, key: str, name: str, after: bool = False) -> str | None:
        """A class's method, or an autotune base's (depth first); ``after``: a base's only."""
        order, todo = [], [key]
        while todo:
            if (now := todo.pop(0)) in order or now not in self.classes:
                continue
            order.append(now)
            module, node = self.classes[now]
            bases = [resolve(self, b, Scope(module)) for b in node.bases]
            todo[:0] = [b[1] for b in bases if b and b[0] == "class"]
        found = [f"{c}.{name}" for c in order[1 if after else 0 :] if f"{c}.{name}" in self.funcs]
        return found[0] if found else None


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's statements, those under ``if``, ``try`` and ``with`` too (not in defs)."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        for attr in ("body", "orelse", "finalbody", "handlers"):
            if not isinstance(node, DEFS):
                found += _statements(getattr(node, attr, []))
    return found


def _binds(node: ast.Import | ast.ImportFrom, module: str, package: bool) -> dict[str, ast.alias]:
    """The names an import binds to autotune, each an alias naming ``module[:name]``."""
    if isinstance(node, ast.Import):
        return {(a.asname or "autotune"): ast.alias(name=a.name if a.asname else "autotune")
                for a in node.names if a.name.split(".")[0] == "autotune"}  # fmt: skip
    base = node.module or ""
    if node.level:  # relative: from the module's package
        parts = module.split(".")[: len(module.split(".")) - node.level + int(package)]
        base = ".".join(parts + ([base] if base else []))
    if base.split(".")[0] != "autotune":
        return {}
    return {(a.asname or a.name): ast.alias(name=f"{base}:{a.name}") for a in node.names}


@dataclass
class Scope:
    """Where an expression is read: its module, the function's locals, its class."""

    module: str
    local: dict[str, Entity | None] = field(default_factory=dict)
    cls: str | None = None


def resolve(code: Code, e: ast.expr, scope: Scope) -> Entity | None:
    """What an expression is, where it can be known statically (else None)."""
    if isinstance(e, ast.Name):
        return scope.local[e.id] if e.id in scope.local else code.name(scope.module, e.id)
    if isinstance(e, ast.Attribute):
        if (base := resolve(code, e.value, scope)) is None:
            return None
        if base[0] == "mod":
            return code.name(base[1], e.attr)
        found = code.method(base[1], e.attr, after=base[0] == "super")
        return ("func", found) if found else None
    if isinstance(e, ast.Call):
        if isinstance(e.func, ast.Name) and e.func.id == "super" and scope.cls:
            return ("super", scope.cls)
        return returned(code, e, scope)
    return None


def returned(code: Code, call: ast.Call, scope: Scope) -> Entity | None:
    """The instance a call returns: a constructor's, or the class its annotation names."""
    callee = resolve(code, call.func, scope)
    if callee and callee[0] == "class":
        return ("inst", callee[1])
    if not callee or callee[0] != "func":
        return None
    module, node, owner = code.funcs[callee[1]]
    if isinstance(call.func, ast.Attribute):  # Self: the class it was called on
        on = resolve(code, call.func.value, scope)
        owner = on[1] if on and on[0] in ("class", "inst", "super") else owner
    todo = [node.returns] if node.returns else []
    while todo:
        e = todo.pop(0)
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            try:
                todo.append(ast.parse(e.value, mode="eval").body)
            except SyntaxError:
                continue
        elif isinstance(e, ast.BinOp):
            todo += [e.left, e.right]
        elif isinstance(e, ast.Name) and e.id == "Self" and owner:
            return ("inst", owner)
        elif (found := resolve(code, e, Scope(module))) and found[0] == "class":
            return ("inst", found[1])
    return None


def callees(code: Code, key: str) -> list[str]:
    """The functions a function calls, in source order, each once (its scope: lazy imports,
    parameters of unknown type but a method's first, locals typed by their last assignment)."""
    module, node, owner = code.funcs[key]
    scope = Scope(module, cls=owner)
    inner = [n for stmt in node.body for n in ast.walk(stmt)]
    inner.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    for n in inner:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            for name, alias in _binds(n, module, module in code.packages).items():
                scope.local[name] = code.imported(alias)
    a = node.args
    params = a.posonlyargs + a.args
    scope.local.update({p.arg: None for p in [*params, *a.kwonlyargs, a.vararg, a.kwarg] if p})
    decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
    if owner and params and "staticmethod" not in decorators:
        scope.local[params[0].arg] = ("class" if "classmethod" in decorators else "inst", owner)
    found: list[str] = []
    stored = [n.id for n in inner if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    scope.local.update(dict.fromkeys(stored))  # any name bound here is local: of unknown type
    for n in inner:  # but one assigned a call: its last assignment's type
        if isinstance(n, ast.Assign):
            typed = returned(code, n.value, scope) if isinstance(n.value, ast.Call) else None
            scope.local.update({t.id: typed for t in n.targets if isinstance(t, ast.Name)})
    for n in inner:
        target = resolve(code, n.func, scope) if isinstance(n, ast.Call) else None
        if target and target[0] == "func":
            found.append(target[1])
        elif target and target[0] == "class":
            made = [code.method(target[1], init) for init in ("__init__", "__post_init__")]
            found += [m for m in made if m]
    return list(dict.fromkeys(found))


def stage(code: Code, module: str) -> int:
    """A module's place in :data:`FLOW` (its package's, or the top-level modules')."""
    parts = module.split(".")
    package = parts[1] if len(parts) > 1 and ".".join(parts[:2]) in code.packages else ""
    return FLOW.index(package) if package in FLOW else len(FLOW)


@dataclass
class Walk:
    order: list[tuple[str, int]]  # (function key, depth), in visiting order
    climbs: list[tuple[str, str]]  # (caller, callee)
    stays: int
    rooms: int
    returns: int
    budget_files: int

    def line(self) -> str:
        return (f"walk from cmd_search: {self.stays} stays in {self.rooms} rooms, "
                f"{len(self.climbs)} climbs back up, {self.returns} returns to a room already "
                f"left; time_budget in {self.budget_files} files")  # fmt: skip


def walk(root: Path, start: str = START) -> Walk:
    """Walk the checkout at ``root`` from ``start`` (``module:Qual.name``)."""
    code = Code.parse(root)
    order: list[tuple[str, int]] = []
    climbs: list[tuple[str, str]] = []

    def visit(key: str, depth: int) -> None:
        order.append((key, depth))
        for callee in callees(code, key):
            if callee not in {k for k, _ in order}:
                if stage(code, callee.partition(":")[0]) < stage(code, key.partition(":")[0]):
                    climbs.append((key, callee))
                visit(callee, depth + 1)

    if start in code.funcs:
        visit(start, 0)
    rooms = [key.partition(":")[0] for key, _ in order]
    collapsed = [m for i, m in enumerate(rooms) if i == 0 or rooms[i - 1] != m]
    returns = sum(m in collapsed[:i] for i, m in enumerate(collapsed))
    texts = [p.read_text() for p in (root / "autotune").rglob("*.py")]
    budget = sum(bool(BUDGET.search(t)) for t in texts)
    return Walk(order, climbs, len(order), len(set(rooms)), returns, budget)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--list", action="store_true", help="the visiting order, indented")
    args = parser.parse_args(argv)
    found = walk(args.root)
    if args.list:
        for key, depth in found.order:
            print("  " * depth + key.removeprefix("autotune."))
    print(found.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
