"""The import graph of src/: no circle, and no private name imported across modules.

Every module of the packages under ``src/`` is parsed (not imported) and every
``import`` / ``from ... import`` in it, at module level or inside a function,
is an edge to the project module it names: ``from pkg import name`` is an
edge to ``pkg.name`` where that is a module, else to ``pkg``.  Two kinds of
edge are left out, each for a stated reason:

* the parent packages Python imports on the way to a module (``import a.b.c``
  runs ``a/__init__`` and ``a/b/__init__``): an edge only to what is named, or
  every module would be in a circle with its package's ``__init__``;
* the imports inside a package ``__init__``'s module-level ``__getattr__``: the
  lazy re-export of the package's public names (``mlir_mx.Linear``), which runs
  on first use of the name, never while either module is being imported.

Two more rules read the same parse:

* the packages' order: ``mlir_mx`` (the library) never imports
  ``mlir_mx_bench`` or ``mlir_mx_testing``, nor ``mlir_mx_bench``
  ``mlir_mx_testing`` (:data:`NEVER`), at module level or inside a function;
* no private attribute reached across modules: ``x._name`` in a module that
  does not define ``_name`` (no ``def``/``class`` of it, no assignment to
  ``_name`` or ``*._name``) while another module of the packages gives its
  objects one (a class's member, ``y._name = ...``), or ``x`` is that module:
  the other module's private, used as a seam (:func:`reach_ins`).

``python tests/test_imports.py [SRC]`` prints what it finds in another tree:
on the tree before issue 25 (bf972a3) it prints the 5 circles and the 17
private imports that issue lists; on the tree before issue 50 (16b5e3a) the
private attributes that issue lists (``Linear._call_raw``, ``MXLinear._adopt``,
``Runner._compiled``, ...) and the imports of the shims it removed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(src: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the packages under ``src``."""
    out = {}
    for top in sorted(p for p in src.iterdir() if (p / "__init__.py").is_file()):
        for path in sorted(top.rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _lazy_reexport(node: ast.AST, tree: ast.Module, is_package: bool) -> bool:
    return is_package and any(
        isinstance(f, ast.FunctionDef) and f.name == "__getattr__" and node in set(ast.walk(f))
        for f in tree.body
    )


def imports(src: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The graph (module -> the project modules it imports) and every private
    name imported across modules (``file:line: from X import _name``)."""
    mods = modules(src)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if _lazy_reexport(node, tree, is_package):
                continue
            where = f"{path.relative_to(src)}:{node.lineno}"
            if isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name in mods)
                continue
            base = node.module or ""
            if node.level:
                anchor = mod.split(".") if is_package else mod.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base not in mods:
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in mods:
                    graph[mod].add(target)
                    continue
                graph[mod].add(base)
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    private.append(f"{where}: from {base} import {name}")
        graph[mod].discard(mod)
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a path back to its start) for each strongly connected
    component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle(graph, comp) for comp in comps]


def _circle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(comp)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & comp):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return sorted(comp)


def test_the_graph_covers_the_packages():
    graph, _ = imports(SRC)
    assert {"mlir_mx", "mlir_mx_bench", "mlir_mx_testing"} <= set(graph)
    assert "mlir_mx.errors" in graph["mlir_mx.diagnostics"]


def test_no_import_circle():
    found = cycles(imports(SRC)[0])
    assert found == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_private_name_imported_across_modules():
    found = imports(SRC)[1]
    assert found == [], "private names imported across modules:\n" + "\n".join(found)


def dangling(src: Path) -> list[str]:
    """Every import, in any module under ``src``, of a module of these packages
    that does not exist (``file:line: module``): a path left behind by a move
    fails only when that line runs (a lazy import in a rarely taken branch)."""
    mods = modules(src)
    tops = {m.split(".")[0] for m in mods}
    out = []
    for path in mods.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in tops and name not in mods:
                    out.append(f"{path.relative_to(src)}:{node.lineno}: {name}")
    return out


def test_every_import_of_the_packages_names_a_module():
    found = dangling(SRC)
    assert found == [], "imports of modules that do not exist:\n" + "\n".join(found)


def test_the_checks_find_a_circle_and_a_private_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def __getattr__(name):\n    from pkg import a\n")
    (pkg / "a.py").write_text("from pkg.b import _helper\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    graph, private = imports(tmp_path)
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]
    assert private == ["pkg/a.py:1: from pkg.b import _helper"]
    assert graph["pkg"] == set()
    (pkg / "c.py").write_text("import pkg.gone\nfrom pkg.b import f\nfrom pkg.old import x\n")
    assert dangling(tmp_path) == ["pkg/c.py:1: pkg.gone", "pkg/c.py:3: pkg.old"]


#: Package -> the packages it never imports: the library stands alone, the
#: benchmark beside it, the testing machinery over both (docs/architecture.md).
NEVER = {"mlir_mx": {"mlir_mx_bench", "mlir_mx_testing"}, "mlir_mx_bench": {"mlir_mx_testing"}}


def _imported(node: ast.Import | ast.ImportFrom, mod: str, is_package: bool) -> list[str]:
    """The absolute dotted names an import statement of module ``mod`` names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not node.level:
        return [node.module or ""]
    anchor = mod.split(".") if is_package else mod.split(".")[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return [".".join(anchor + ([node.module] if node.module else []))]


def forbidden_imports(src: Path, never: dict[str, set[str]] = NEVER) -> list[str]:
    """Every import, anywhere in a module (inside functions and lazy
    re-exports too), of a package its own package never imports
    (``file:line: mod imports name``)."""
    out = []
    for mod, path in modules(src).items():
        banned = never.get(mod.split(".")[0], set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported(node, mod, path.name == "__init__.py"):
                if name.split(".")[0] in banned:
                    out.append(f"{path.relative_to(src)}:{node.lineno}: {mod} imports {name}")
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """The private names a module defines: every one (functions and classes,
    any name or attribute it assigns, a ``for`` or ``with`` target, a
    deletion); those an object of another module may carry (a class's
    methods and class attributes, any ``x._name = ...``); those the module
    object carries (its top-level names)."""
    every, members, top = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            every.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            every.add(node.id)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            every.add(node.attr)
            members.add(node.attr)
        if isinstance(node, ast.ClassDef):
            members.update(_bound_in(node.body))
    top = _bound_in(tree.body)
    return tuple({n for n in names if _is_private(n)} for names in (every, members, top))


def _bound_in(body: list[ast.stmt]) -> set[str]:
    """The names a block of statements binds at its own level (in ``if`` and
    ``try`` blocks too, not in functions or classes)."""
    out = set()
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(stmt.name)
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                out.add(node.id)
    return out


def _module_names(tree: ast.Module, mod: str, is_package: bool, mods) -> dict[str, str]:
    """The names a module binds to modules of the packages (``from . import
    layout``, ``import a.b as c``), each with the module's dotted name."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in mods:
                    out[a.asname] = a.name
                elif not a.asname and a.name.split(".")[0] in mods:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            (base,) = _imported(node, mod, is_package)
            for a in node.names:
                if f"{base}.{a.name}" in mods:
                    out[a.asname or a.name] = f"{base}.{a.name}"
    return out


def _own(value: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own attributes."""
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Name) and value.func.id == "super"
    return isinstance(value, ast.Name) and value.id in ("self", "cls")


def _module_of(value: ast.expr, names: dict[str, str], mods) -> str | None:
    """The module of the packages ``value`` names (``layout``, ``a.b``), or None."""
    parts = []
    while isinstance(value, ast.Attribute):
        parts.insert(0, value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or value.id not in names:
        return None
    dotted = ".".join([names[value.id], *parts])
    return dotted if dotted in mods else None


def reach_ins(src: Path) -> list[str]:
    """Every private attribute one module reads from another's objects
    (``file:line: x._name``): ``x._name`` (``x`` not ``self``, ``cls`` or
    ``super()``) in a module that does not define ``_name``, where another
    module defines it as a class's member or an attribute (``y._name = ...``),
    or ``x`` is that module (``layout._helper``).  A third party's private
    (``torch._C``, a tensor's ``_version``) is a member of no class here, and
    a module's own privates on other objects of its classes are its own
    business: neither is reported."""
    mods = modules(src)
    trees = {mod: ast.parse(path.read_text(), str(path)) for mod, path in mods.items()}
    defined = {mod: _defined(tree) for mod, tree in trees.items()}
    members: dict[str, set[str]] = {}  # private name -> the modules whose objects carry it
    for mod, (_every, names, _top) in defined.items():
        for name in names:
            members.setdefault(name, set()).add(mod)
    out = []
    for mod, tree in trees.items():
        path = mods[mod]
        names = _module_names(tree, mod, path.name == "__init__.py", mods)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            if _own(node.value) or node.attr in defined[mod][0]:
                continue
            target = _module_of(node.value, names, mods)
            if (node.attr in defined[target][2]) if target else members.get(node.attr):
                out.append(f"{path.relative_to(src)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(out), key=lambda s: (s.split(":")[0], int(s.split(":")[1]), s))


def test_the_library_imports_neither_the_bench_nor_the_testing_package():
    found = forbidden_imports(SRC)
    assert found == [], "imports against the packages' order:\n" + "\n".join(found)


def test_no_private_attribute_reached_across_modules():
    found = reach_ins(SRC)
    assert len(modules(SRC)) > 50
    assert found == [], "private attributes of other modules' objects:\n" + "\n".join(found)


def test_the_checks_find_a_forbidden_import_and_a_reach_in(tmp_path):
    for top in ("lib", "bench"):
        (tmp_path / top).mkdir()
        (tmp_path / top / "__init__.py").write_text("")
    (tmp_path / "lib" / "a.py").write_text(
        "class A:\n    def __init__(self):\n        self._x, self._y = 1, 2\n"
        "    def same(self, other):\n        return other._x + self._y\n"
        "def _helper():\n    import bench.cli\n"
    )
    (tmp_path / "lib" / "b.py").write_text(
        "import torch\nfrom . import a\n"
        "def f(obj, t):\n"
        "    obj._x = t._C\n"  # _x assigned here: b's own; _C: a third party's
        "    super()._y\n"
        "    return obj._y + a._helper() + t._helper + obj.__class__.__name__\n"  # t: no module
        "from bench import cli as _cli\n"
    )
    (tmp_path / "bench" / "cli.py").write_text("from lib.a import A\nA()._y\n")
    never = {"lib": {"bench"}}
    found = forbidden_imports(tmp_path, never)
    assert found == ["lib/a.py:7: lib.a imports bench.cli", "lib/b.py:7: lib.b imports bench"]
    found = forbidden_imports(tmp_path, {"bench": {"lib"}})
    assert found == ["bench/cli.py:1: bench.cli imports lib.a"]
    found = reach_ins(tmp_path)
    assert found == ["bench/cli.py:2: A()._y", "lib/b.py:6: a._helper", "lib/b.py:6: obj._y"]


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    graph, private = imports(root)
    for c in cycles(graph):
        print("circle:", " -> ".join(c))
    for p in private:
        print("private:", p)
    for d in dangling(root):
        print("no such module:", d)
    for f in forbidden_imports(root):
        print("against the packages' order:", f)
    for r in reach_ins(root):
        print("private attribute:", r)


def test_the_tools_do_not_import_ml_dtypes():
    """``import ml_dtypes`` (0.7) costs 0.8-1 s of numpy ufunc registration;
    mx-opt (dialect, passes, pipelines) needs no numpy dtype of a narrow float,
    so every mx-opt process (71 per lit run) is spared it, as is an mx-runner
    that stops at a usage error: the formats table makes its dtypes on first
    use (``ElementFormat.dtype``, ``SCALE_DTYPE``), the kernels their tables."""
    import subprocess

    code = (
        "import sys, mlir_mx.tools.mx_opt, mlir_mx.tools.mx_runner, mlir_mx.numerics as N\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported ml_dtypes'\n"
        "assert str(N.ELEMENT_FORMATS['f4E2M1FN'].dtype) == 'float4_e2m1fn'\n"
        "assert 'ml_dtypes' in sys.modules\n"
        "assert str(N.SCALE_DTYPE) == 'float8_e8m0fnu'\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_passes_that_do_not_lower_do_not_import_linalgs_opdsl():
    """Looking up any pass imports every pass module; ``mlir.dialects.linalg``
    builds upstream's opdsl named ops on import (0.15 s, a quarter of an
    ``mx-opt --canonicalize`` run), so the mx-to-linalg builders import it on
    first use (``helpers.linalg_dialect``), and only a lowering pays it."""
    import subprocess

    code = (
        "import sys\n"
        "from mlir_mx.tools.mx_opt import main\n"
        "from mlir_mx.passes.registry import all_passes\n"
        "assert 'mx-to-linalg' in {p.argument for p in all_passes()}\n"
        "sys.argv = ['mx-opt', '-', '--canonicalize']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "assert 'mlir.dialects.linalg' not in sys.modules, 'imported linalg'\n"
        "from mlir_mx.passes.mx_to_linalg.helpers import linalg_dialect\n"
        "assert linalg_dialect().fill and 'mlir.dialects.linalg' in sys.modules\n"
    )
    mod = "func.func @f(%a: f32) -> f32 {\n  return %a : f32\n}\n"
    run = subprocess.run([sys.executable, "-c", code], input=mod, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "func.func @f" in run.stdout


def test_running_f32_code_does_not_import_ml_dtypes(tmp_path):
    """A module with f32 parameters only (an mx-runner ``main`` of the lit
    tests) compiles, is stored in and loaded from the compile cache, and runs
    without ml_dtypes (1.2 s of an mx-runner's 2.8 s): its signatures take
    numpy's own dtypes (``signature.numpy_dtype``, the cache's JSON)."""
    import subprocess

    code = (
        "import sys, numpy as np\n"
        "from mlir_mx.execution import Runner\n"
        "text = 'func.func @f(%a: memref<4xf32>) -> f32 {\\n"
        "  %c0 = arith.constant 0 : index\\n"
        "  %v = memref.load %a[%c0] : memref<4xf32>\\n"
        "  return %v : f32\\n}'\n"
        f"r = Runner(text, cache_dir={str(tmp_path)!r})\n"
        "assert r.f(np.arange(4, dtype=np.float32) + 2) == 2.0\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported ml_dtypes'\n"
        "from mlir_mx.execution.signature import numpy_dtype\n"
        "assert str(numpy_dtype('f8E4M3FN')) == 'float8_e4m3fn' and 'ml_dtypes' in sys.modules\n"
        "print('machine code from the cache:', r._compiled.machine_code)\n"
    )
    for loaded in (False, True):  # compiled and stored, then loaded by a new process
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert f"machine code from the cache: {loaded}" in run.stdout


ORACLE_NAMES = {"quantize", "dequantize", "fold_scale", "matmul_reference", "blocked_order"}
NUMERICS = {"mlir_mx.numerics", "mlir_mx.numerics.mx", "mlir_mx.numerics.matmul"}


def oracle_reach_ins(root: Path) -> list[str]:
    """Every use, in a Python file under ``root``'s ``src``, ``tests``,
    ``bench``, ``examples`` or ``scripts`` outside ``mlir_mx/numerics`` and
    ``mlir_mx/oracle.py``, of an oracle function through
    :mod:`mlir_mx.numerics` (``from mlir_mx.numerics import quantize``,
    relative too, or ``N.quantize`` on the imported module): the oracle is
    named ``mlir_mx.oracle`` everywhere else, so a bare ``quantize`` never
    leaves the reader to guess between it and the compiled ``mlir_mx.quantize``."""
    out = []
    for path in sorted(p for d in ("src", "tests", "bench", "examples", "scripts")
                       for p in (root / d).rglob("*.py")):  # fmt: skip
        rel = path.relative_to(root).as_posix()
        if rel.startswith("src/mlir_mx/numerics/") or rel == "src/mlir_mx/oracle.py":
            continue
        parts = path.relative_to(root).with_suffix("").parts[1:]  # below src/
        tree = ast.parse(path.read_text(), str(path))
        aliases = set(NUMERICS)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update(a.asname for a in node.names if a.name in NUMERICS and a.asname)
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level and rel.startswith("src/"):
                anchor = list(parts[: len(parts) - node.level])
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:
                if f"{base}.{a.name}" in NUMERICS:
                    aliases.add(a.asname or a.name)
                elif base in NUMERICS and a.name in ORACLE_NAMES:
                    out.append(f"{rel}:{node.lineno}: from {base} import {a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ORACLE_NAMES:
                if ast.unparse(node.value) in aliases:
                    out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_oracle_is_imported_as_mlir_mx_oracle(tmp_path):
    root = SRC.parent
    found = oracle_reach_ins(root)
    assert found == [], "oracle functions taken from mlir_mx.numerics:\n" + "\n".join(found)
    pkg = tmp_path / "src" / "mlir_mx"
    (pkg / "numerics").mkdir(parents=True)
    (pkg / "numerics" / "mx.py").write_text("from .formats import quantize\n")
    (pkg / "oracle.py").write_text("from mlir_mx.numerics import quantize\n")
    (pkg / "linear").mkdir()
    (pkg / "linear" / "a.py").write_text(
        "from ..numerics import MXArray, quantize\nfrom mlir_mx import numerics as N\n"
        "from mlir_mx import oracle\nN.dequantize(oracle.quantize(N.MXArray))\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text(
        "import mlir_mx.numerics.matmul as M\nfrom mlir_mx.numerics.mx import fold_scale\n"
        "M.blocked_order()\n"
    )
    assert oracle_reach_ins(tmp_path) == [
        "src/mlir_mx/linear/a.py:1: from mlir_mx.numerics import quantize",
        "src/mlir_mx/linear/a.py:4: N.dequantize",
        "tests/t.py:2: from mlir_mx.numerics.mx import fold_scale",
        "tests/t.py:3: M.blocked_order",
    ]
