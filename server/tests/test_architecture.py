"""The server is one-way: ql -> plan -> engine -> storage -> held -> database -> replication -> http
(server README).

A module may import only from its own layer or the layers before it; `errors`, `values` and
`convert` are the base every layer may use. The test reads every module's imports from its source, and
checks the README's picture of the layers against RANK and the package's files.

Calls follow the imports only if the engine is typed where it is handed on: a parameter or an
attribute holding it (named db, eng, engine or database) in the engine, the held claims, HTTP
or the command line is annotated with its type, never `Any`, `object` or nothing, which would
let any call through unseen by mypy.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fenecdb_server

PACKAGE = Path(fenecdb_server.__file__).parent
README = Path(__file__).resolve().parents[1] / "README.md"

RANK = {
    "errors": 0,
    "values": 0,
    "convert": 0,  # conversion on write, beside values so that it is compiled: imports errors and values
    "gc_policy": 0,  # how the process runs Python's cycle collector: imports nothing of ours
    "compiled": 0,  # which modules run compiled, the switch to the sources: imports nothing of ours
    "pacing": 0,  # how a statement in a worker thread hands the GIL over: imports nothing of ours
    "flags": 0,  # the command line's flags table, read by cli and replication/options: imports nothing of ours
    "ql": 1,
    "plan": 2,
    "policy": 2.5,  # access rules: parsed with ql, split with plan's helpers, enforced by engine/scoped
    "engine": 3,
    "storage": 4,
    "held": 4.5,  # held claims: lines, looks, time wakes, bidding; over the engine, under database and http
    "database": 5,
    "replication": 5.5,  # the primary's feed and the replica's follower: over the database, under http
    "http": 6,
    "cli": 7,
    "__init__": 8,
}


def layer_of(module: str) -> str:
    """'fenecdb_server.engine.access' -> 'engine'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[str]:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    here = ".".join(rel.parts)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    if path.name == "__init__.py":
        package = here.rsplit(".", 1)[0] if here.endswith(".__init__") else here
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    out.extend(f"{target}.{a.name}" for a in node.names)
                    continue
            else:
                target = node.module or ""
            out.append(target)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return [m for m in out if m.startswith("fenecdb_server.")]


def test_every_module_has_a_layer():
    for path in PACKAGE.rglob("*.py"):
        mod = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        assert layer_of(mod) in RANK, f"{mod} is in no layer of the diagram"


def test_no_module_imports_upward():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mine = RANK[layer_of(mod)]
        for target in imports(path):
            theirs = RANK.get(layer_of(target))
            if theirs is None or theirs > mine:
                wrong.append(f"{mod} imports {target}")
    assert not wrong, "imports against the diagram:\n" + "\n".join(wrong)


def test_the_check_sees_an_upward_import(tmp_path):
    """The reader must catch a relative import that climbs a layer (a check that cannot fail is none)."""
    fake = PACKAGE / "plan" / "compile.py"
    found = imports(fake)
    assert "fenecdb_server.ql" in found or any(m.startswith("fenecdb_server.ql") for m in found)
    assert RANK[layer_of("fenecdb_server.http.app")] > RANK[layer_of("fenecdb_server.engine.access")]


# ---------------------------------------------------------------- the README's picture

LAYER_LINE = re.compile(r"^ {3}(\w+)(/|\.py)\s")


def picture(readme: str) -> list[tuple[str, set[str]]]:
    """The layers of the README's picture, top to bottom, each with the modules its lines name.
    A layer's line starts at column 3 with `name/` (a package) or `name.py` (a module); the lines
    below it, up to the next layer's, go on naming its modules."""
    section = readme.split("## How it is built", 1)[1]
    block = section.split("```", 2)[1]
    layers: list[tuple[str, set[str]]] = []
    for line in block.splitlines():
        m = LAYER_LINE.match(line)
        if m:
            layers.append((m.group(1), set()))
            line = line[m.end():]
        if layers and layers[-1][0] in PACKAGES:
            layers[-1][1].update(re.findall(r"(\w+)\.py\b", line))
    return layers


PACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def picture_errors(layers: list[tuple[str, set[str]]]) -> list[str]:
    wrong = []
    named = [name for name, _ in layers]
    for name in sorted(set(RANK) - set(named)):
        wrong.append(f"the layer `{name}` (RANK) is not in the picture")
    for name in sorted(set(named) - set(RANK)):
        wrong.append(f"the picture names a layer `{name}` that RANK does not have")
    ranks = [RANK[n] for n in named if n in RANK]
    if ranks != sorted(ranks):
        wrong.append(f"the picture's layers are not in RANK's order: {named}")
    for name, modules in layers:
        if name not in PACKAGES:
            if not (PACKAGE / f"{name}.py").exists():
                wrong.append(f"the picture names `{name}.py`, which does not exist")
            continue
        real = {p.stem for p in (PACKAGE / name).glob("*.py")} - {"__init__"}
        for m in sorted(real - modules):
            wrong.append(f"`{name}/{m}.py` is not in the picture")
        for m in sorted(modules - real):
            wrong.append(f"the picture names `{name}/{m}.py`, which does not exist")
    return wrong


def test_the_readme_pictures_every_layer_and_module_and_nothing_else():
    wrong = picture_errors(picture(README.read_text(encoding="utf-8")))
    assert not wrong, "server/README.md's picture against the package:\n" + "\n".join(wrong)


def test_the_picture_check_sees_a_missing_a_stray_and_a_misplaced_name():
    layers = picture(README.read_text(encoding="utf-8"))
    text = {name: set(mods) for name, mods in layers}
    text["engine"].discard("execute")
    text["plan"].add("optimizer")
    doctored = [(name, text[name]) for name, _ in layers if name != "cli"]
    doctored.insert(0, ("http", text["http"]))
    wrong = "\n".join(picture_errors(doctored))
    assert "`engine/execute.py` is not in the picture" in wrong
    assert "`plan/optimizer.py`, which does not exist" in wrong
    assert "the layer `cli` (RANK) is not in the picture" in wrong
    assert "not in RANK's order" in wrong

HANDLE_NAMES = {"db", "eng", "engine", "database"}
UNTYPED = {"Any", "object", "typing.Any"}
HANDLE_PARTS = ["engine", "held", "http", "cli.py"]


def untyped_handles(path: Path) -> list[str]:
    """Each parameter or attribute named as an engine handle whose annotation is missing, Any or object."""
    source = path.read_text(encoding="utf-8")
    out = []

    def untyped(ann: ast.expr | None) -> bool:
        if ann is None:
            return True
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value.strip() in UNTYPED
        return ast.unparse(ann) in UNTYPED

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg in HANDLE_NAMES and untyped(arg.annotation):
                    out.append(f"{path.name}:{arg.lineno} parameter `{arg.arg}` of {node.name}()")
        elif isinstance(node, ast.AnnAssign):
            t = node.target
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else None
            if name in HANDLE_NAMES and untyped(node.annotation):
                out.append(f"{path.name}:{node.lineno} attribute `{name}`")
    return out


def handle_modules() -> list[Path]:
    out = []
    for part in HANDLE_PARTS:
        p = PACKAGE / part
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.exists() else [])
    return out


def test_no_engine_handle_is_typed_any():
    assert handle_modules(), "no module to check: the parts moved"
    wrong = [w for path in handle_modules() for w in untyped_handles(path)]
    assert not wrong, "engine handles typed Any (or not at all):\n" + "\n".join(wrong)


def test_the_check_sees_an_any_typed_handle(tmp_path):
    """Planted handles typed Any, `"Any"`, object and not at all are each seen; typed ones are not."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from typing import Any\n"
        "def a(db: Any) -> None: ...\n"
        "def b(x: int, *, eng: 'Any') -> None: ...\n"
        "async def c(engine: object) -> None: ...\n"
        "def d(database) -> None: ...\n"
        "class E:\n"
        "    def __init__(self, db: Engine) -> None:\n"
        "        self.db: Any = db\n"
        "def f(db: Engine, eng: 'Engine', other: Any) -> None: ...\n"
    )
    found = untyped_handles(planted)
    assert [w.split(" ", 1)[1] for w in found] == [
        "parameter `db` of a()", "parameter `eng` of b()", "parameter `engine` of c()",
        "parameter `database` of d()", "attribute `db`"]


# ---------------------------------------------------------------- the engine's helpers

def engine_importers(root: Path) -> list[str]:
    """The modules of engine/ (engine.py itself aside) that import `Engine`, at run time or for types."""
    out = []
    for path in sorted((root / "engine").glob("*.py")):
        if path.name == "engine.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and any(a.name == "Engine" for a in node.names):
                out.append(f"engine/{path.name}:{node.lineno}")
    return out


def test_the_engine_helpers_take_the_catalog_never_the_engine():
    """A helper of the engine is handed the `Catalog` (engine/catalog.py) and what else it needs by
    name (a writer, a feed), never the whole `Engine`: it cannot reach the log, the listeners or the
    parse cache it was not given."""
    assert not engine_importers(PACKAGE), engine_importers(PACKAGE)


def test_the_helper_check_sees_a_type_only_import(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "engine.py").write_text("class Engine: ...\n")
    (tmp_path / "engine" / "helper.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .engine import Engine\n")
    assert engine_importers(tmp_path) == ["engine/helper.py:3"]
