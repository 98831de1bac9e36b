"""The pages that map the code name only paths that exist.

``docs/architecture.md`` (and the pages beside it that name modules:
``docs/adding-a-pass.md``, ``docs/adding-a-kernel.md``, ``docs/passes/*.md``)
drift when a module moves.  Every path they name is checked against the tree:

* the folder tree of ``docs/architecture.md`` (its code block that starts with
  ``src/``): each entry resolved against the folders above it by indentation
  (``kernels/`` then ``registry.py`` is ``src/mlir_mx/kernels/registry.py``),
  and each file name in an entry's description against the entry's folder,
  else the repository;
* every other path token of a page (``passes/legalize/host_target.py``,
  ``execution/bound.py``, ``tests/passes/``, ``docs/library.md``, a glob such
  as ``bench/results/decode-gemv-*.md``, a brace list ``{a,b}.mlir``): a file
  or folder of the repository whose path ends with it;
* every dotted name of the packages (``mlir_mx.execution.compiled``,
  ``mlir_mx.oracle.quantize``, ``mlir_mx_bench.cli``): the longest prefix is a
  module of ``src/``, and the next name, if any, is bound in that module
  (a ``def``, ``class``, assignment, import, or an entry of ``__all__``);
* every name in backticks qualified by a module's last names
  (``disk_cache.ObjectCache``, ``kernels.dot.units.pack_records``): some
  module so named binds it; or by a class of ``src/`` (``Linear.call_into``):
  the class has such a method, class attribute or ``self.`` attribute.

Placeholders (``passes/foo_bar.py``, ``mx-my-pass``, ``<name>.py``) are not
paths; a file that a patch under ``docs/examples/`` creates counts as one
(``docs/adding-a-kernel.md``'s worked example).

``python tests/test_architecture_doc.py [ROOT]`` prints what it finds.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = "docs/architecture.md"
#: The pages checked: the architecture and the pages that name modules.
PAGES = (ARCHITECTURE, "docs/adding-a-pass.md", "docs/adding-a-kernel.md", "docs/passes/*.md")
#: Not paths, but the names of one: the examples of a naming rule.
PLACEHOLDERS = ("foo", "my_pass", "my-pass", "<", ">")
#: The input file of the example command lines (``mx-opt f.mlir ...``).
EXAMPLE_FILES = {"f.mlir"}
#: What a file path ends with.
EXTENSIONS = ("py", "md", "mlir", "txt", "patch", "toml", "cfg", "sh")
#: Folders that are never part of the tree a page describes.
SKIP_DIRS = {
    ".git",
    ".venv",
    "__pycache__",
    "Output",
    "build",
    "dist",
    ".pytest_cache",
    ".ruff_cache",
}
PACKAGES = ("mlir_mx", "mlir_mx_bench", "mlir_mx_testing")

_EXT = "|".join(EXTENSIONS)
#: A file path: parts separated by ``/``, the last with a known extension.
FILE_RE = re.compile(
    r"(?<![\w/.{-])((?:[\w.*{},-]+/)*[\w*{},-]*[\w*}]\.(?:" + _EXT + r"))(?![\w/]|\.\w)"
)
#: A folder: a name, or names separated by ``/``, ending with ``/`` (``passes/legalize/``).
DIR_RE = re.compile(r"(?<![\w/.-])((?:[A-Za-z_][\w.-]*/)+)(?=[\s`),:;]|$)")
#: A path from the repository's root without a trailing slash (``tests/bench``).
ROOTED_RE = re.compile(r"(?<![\w/.-])((?:src|tests|docs|bench|examples|scripts)/[\w./*-]*[\w*])")
#: A name in backticks qualified by another (``Runner.bind``, ``disk_cache.ObjectCache``).
QUALIFIED_RE = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
#: The first names of qualified names that also name what is not ours: the
#: torch library (``torch.compile``) and the mx dialect's ops (``mx.kernel``).
OUTSIDE = {"torch", "mx"}
#: A dotted name of the packages.
DOTTED_RE = re.compile(rf"(?<![\w.])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)")


def _expand(token: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (one brace group at a time)."""
    m = re.search(r"\{([^{}]*)\}", token)
    if m is None:
        return [token]
    return [
        x for alt in m[1].split(",") for x in _expand(token[: m.start()] + alt + token[m.end() :])
    ]


def _placeholder(token: str) -> bool:
    return token in EXAMPLE_FILES or any(p in token for p in PLACEHOLDERS)


class Tree:
    """The files and folders of a repository, as relative POSIX paths."""

    def __init__(self, root: Path):
        self.root = root
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        stack = [root]
        while stack:
            d = stack.pop()
            for p in d.iterdir():
                rel = p.relative_to(root).as_posix()
                if p.is_dir():
                    if p.name not in SKIP_DIRS and not p.name.endswith(".egg-info"):
                        self.dirs.add(rel)
                        stack.append(p)
                else:
                    self.files.add(rel)
        for patch in (root / "docs" / "examples").glob("*.patch"):
            self.files |= set(re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), re.M))

    def _pool(self, path: str) -> set[str]:
        """Where ``path`` may be: a folder ends with ``/``, a file has an
        extension, a path from the root without either may be both
        (``tests/bench``), or a module's attribute (``tests/matmul_cases.schedule_cases``)."""
        if path.endswith("/"):
            return self.dirs
        if FILE_RE.fullmatch(path):
            return self.files
        return self.dirs | self.files | {f.removesuffix(".py") + "." for f in self.files}

    def exists(self, path: str, base: str = "") -> bool:
        """``path`` is ``base/path`` (``base`` empty: the root)."""
        pool, full = self._pool(path), f"{base}/{path}" if base else path
        return any(_matches(p, c) for c in _candidates(full) for p in pool)

    def ends_with(self, path: str) -> bool:
        """Some file or folder's path ends with ``path`` (after its ``../``)."""
        pool, tail = self._pool(path), re.sub(r"^(\.\./|\./)+", "", path)
        return any(_matches(p, c, suffix=True) for c in _candidates(tail) for p in pool)


def _matches(path: str, pattern: str, suffix: bool = False) -> bool:
    """``path`` is ``pattern`` (a glob where it has a ``*``), or, with
    ``suffix``, ends with ``/pattern``."""
    if "*" in pattern:
        return fnmatch.fnmatchcase(path, pattern) or (
            suffix and fnmatch.fnmatchcase(path, f"*/{pattern}")
        )
    return path == pattern or (suffix and path.endswith(f"/{pattern}"))


def _candidates(path: str) -> list[str]:
    """The patterns ``path`` may match in a pool: itself without its
    trailing ``/``, and a module's name with the attribute cut."""
    path = path.rstrip("/")
    head, dot, tail = path.rpartition(".")
    return [path, f"{head}."] if dot and "/" not in tail else [path]


def path_tokens(text: str) -> list[str]:
    """Every file, folder and rooted path ``text`` names (brace lists expanded)."""
    found = []
    for line in text.splitlines():
        for regex in (FILE_RE, DIR_RE, ROOTED_RE):
            found += regex.findall(line)
    tokens = {t for tok in found for t in _expand(tok)}
    return sorted(t for t in tokens if not _placeholder(t) and not t.startswith("/"))


def tree_block(text: str) -> list[str]:
    """The lines of the folder tree: the first code block that starts with ``src/``."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    return next((b.splitlines() for b in blocks if b.startswith("src/")), [])


def tree_entries(lines: list[str]) -> list[tuple[str, str]]:
    """``(path, description)`` of each entry of a folder tree: a line whose
    first word is a file (``name.py``) or a folder (``name/``), resolved
    against the folders above it by indentation; other lines continue the
    description of the entry above."""
    out: list[tuple[str, str]] = []
    parents: list[tuple[int, str]] = []  # (indent, folder path) of the open folders
    for line in lines:
        name = line.split()[0] if line.strip() else ""
        if not re.fullmatch(r"[\w./-]+/|[\w.-]+\.\w+", name):
            continue
        indent = len(line) - len(line.lstrip())
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = f"{parents[-1][1]}/{name}" if parents else name
        out.append(
            (path.rstrip("/") + ("/" if name.endswith("/") else ""), line.strip()[len(name) :])
        )
        if name.endswith("/"):
            parents.append((indent, path.rstrip("/")))
    return out


def tree_problems(text: str, tree: Tree) -> list[str]:
    """The entries of the folder tree, and the files their descriptions name,
    that do not exist."""
    out = []
    for path, description in tree_entries(tree_block(text)):
        if not tree.exists(path):
            out.append(f"folder tree: {path}")
            continue
        folder = path.rstrip("/") if path.endswith("/") else path.rpartition("/")[0]
        for token in path_tokens(description):
            if not (tree.exists(token, folder) or tree.exists(token)):
                out.append(f"folder tree: {token} (in {path}'s line)")
    return out


def module_names(src: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the packages under ``src``."""
    out = {}
    for package in PACKAGES:
        for path in sorted((src / package).rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def bound_names(path: Path) -> set[str]:
    """The names a module binds at its top level, and those its ``__all__`` lists."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return names


def dotted_problems(text: str, modules: dict[str, Path]) -> list[str]:
    """The dotted names of the packages in ``text`` that name no module, or
    a name their module does not bind."""
    out = []
    for name in sorted(set(DOTTED_RE.findall(text))):
        parts = name.split(".")
        prefix = next((k for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules), 0)
        if prefix == 0:
            out.append(f"no module: {name}")
        elif prefix < len(parts) and parts[prefix] not in bound_names(
            modules[".".join(parts[:prefix])]
        ):
            out.append(f"{'.'.join(parts[:prefix])} has no {parts[prefix]}: {name}")
    return out


class Code:
    """The modules of ``src/`` and the classes in them, as their names."""

    def __init__(self, src: Path):
        self.modules = module_names(src)
        self.bound = {name: bound_names(path) for name, path in self.modules.items()}
        self.members: dict[str, set[str]] = {}
        for path in self.modules.values():
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    self.members.setdefault(node.name, set()).update(class_members(node))

    def qualified_problems(self, text: str) -> list[str]:
        """The names in backticks qualified by a module (``disk_cache.ObjectCache``,
        ``kernels.dot.units.pack_records``) or by a class of ``src/``
        (``Linear.call_into``) that name nothing there."""
        out = []
        for name in sorted(set(QUALIFIED_RE.findall(text))):
            parts = name.split(".")
            if parts[0] in PACKAGES or parts[0] in OUTSIDE or FILE_RE.fullmatch(name):
                continue
            if parts[0] in self.members:
                if parts[1] not in self.members[parts[0]]:
                    out.append(f"class {parts[0]} has no {parts[1]}: {name}")
                continue
            for k in range(len(parts), 0, -1):
                found = [m for m in self.modules if f".{m}".endswith("." + ".".join(parts[:k]))]
                if found:
                    if k < len(parts) and not any(parts[k] in self.bound[m] for m in found):
                        out.append(f"no module of {'.'.join(parts[:k])} binds {parts[k]}: {name}")
                    break
        return out


def class_members(node: ast.ClassDef) -> set[str]:
    """A class's methods, class attributes and fields, and what its methods
    assign to ``self``."""
    out = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(item.name)
            for n in ast.walk(item):
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                    if isinstance(n.value, ast.Name) and n.value.id == "self":
                        out.add(n.attr)
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def page_problems(
    page: Path, root: Path, tree: Tree | None = None, code: Code | None = None
) -> list[str]:
    """What ``page`` names that does not exist under ``root``."""
    tree, code = tree or Tree(root), code or Code(root / "src")
    text = page.read_text()
    out = tree_problems(text, tree) if page.name == Path(ARCHITECTURE).name else []
    out += [f"no such path: {t}" for t in path_tokens(text) if not tree.ends_with(t)]
    out += dotted_problems(text, code.modules)
    return out + code.qualified_problems(text)


def pages(root: Path) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def test_the_pages_are_found():
    found = [p.relative_to(ROOT).as_posix() for p in pages(ROOT)]
    assert ARCHITECTURE in found and "docs/passes/mx-host-target.md" in found and len(found) > 10


def test_the_folder_tree_is_read():
    entries = dict(tree_entries(tree_block((ROOT / ARCHITECTURE).read_text())))
    assert "src/mlir_mx/passes/legalize/host_target.py" in entries
    assert "units.py" in entries["src/mlir_mx/kernels/dot/"]
    assert len(entries) > 60


def test_every_path_the_pages_name_exists():
    tree, code = Tree(ROOT), Code(ROOT / "src")
    found = {
        p.relative_to(ROOT).as_posix(): page_problems(p, ROOT, tree, code) for p in pages(ROOT)
    }
    found = {page: problems for page, problems in found.items() if problems}
    assert not found, "paths that do not exist:\n" + "\n".join(
        f"{page}: {problem}" for page, problems in found.items() for problem in problems
    )


def test_the_checks_find_a_missing_path(tmp_path):
    src = tmp_path / "src" / "mlir_mx"
    (src / "passes" / "legalize").mkdir(parents=True)
    (src / "__init__.py").write_text("from x import y\n__all__ = ['Linear']\n")
    (src / "passes" / "__init__.py").write_text("")
    (src / "passes" / "legalize" / "masked_stores.py").write_text("")
    (src / "passes" / "legalize" / "host_target.py").write_text(
        "X = 1\n\n\nclass Linear:\n    def call_into(self):\n        self.threads = 1\n"
    )
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "architecture.md"
    good = (
        "# A\n\n```\nsrc/mlir_mx/     the library\n  passes/        the rewrites\n"
        "    legalize/    host_target.py: the target\n      host_target.py  ok\n"
        "                 a continued line, not_a_file\n```\n\n"
        "`passes/legalize/host_target.py`, `legalize/{host_target,masked_stores}.py`, "
        "`mlir_mx.Linear`, `mlir_mx.passes.legalize.host_target.X`, `host_target.X`, "
        "`Linear.call_into`, `Linear.threads`, `passes/foo_bar.py`, `docs/*.md`, /proc/cpuinfo.\n"
    )
    page.write_text(good)
    assert page_problems(page, tmp_path) == []
    bad = [  # (what is written, a wrong path or name instead, how it is reported)
        ("legalize/    host_target.py:", "legalize/    host_targets.py:", "host_targets.py (in"),
        (
            "      host_target.py  ok",
            "      hosttarget.py  ok",
            "tree: src/mlir_mx/passes/legalize/hosttarget.py",
        ),
        ("  passes/        the", "  pass/          the", "folder tree: src/mlir_mx/pass/"),
        (
            "`passes/legalize/host_target.py`",
            "`passes/host_target.py`",
            "no such path: passes/host",
        ),
        ("masked_stores}.py", "masked_store}.py", "no such path: legalize/masked_store.py"),
        ("`docs/*.md`", "`docs/*.rst.md`", "no such path: docs/*.rst.md"),
        ("`mlir_mx.Linear`", "`mlir_mx.Lineal`", "mlir_mx has no Lineal"),
        (
            "`mlir_mx.passes.legalize.host_target.X`",
            "`mlir_mx.passes.host_target.X`",
            "passes has no",
        ),
        ("`host_target.X`", "`host_target.Y`", "no module of host_target binds Y"),
        ("`Linear.call_into`", "`Linear.call_raw`", "class Linear has no call_raw"),
    ]
    for old, new, reported in bad:
        assert good.count(old) == 1, old
        page.write_text(good.replace(old, new))
        found = page_problems(page, tmp_path)
        assert any(reported in f for f in found), f"{new.strip()}: {found}"


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    tree, code = Tree(root), Code(root / "src")
    for p in pages(root):
        for problem in page_problems(p, root, tree, code):
            print(f"{p.relative_to(root).as_posix()}: {problem}")
