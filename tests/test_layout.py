"""The import structure of the rooms (README "Layout"): ops -> dev -> service/config -> pipeline, lifecycle -> offline_train.

Every import (module level or inside a function) of every module is read
from its source; an import of a room above, between the two middle rooms
(pipeline and lifecycle) or any module-level cycle fails the test.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# room -> rank; a module may import its own room or a lower rank only.
RANKS = {"offline_train": 0, "streamer.pipeline": 1, "streamer.lifecycle": 1, "streamer": 2,
         "streamer.dev": 3, "streamer.ops": 4, "streamer.__main__": 5}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("streamer", "offline_train"):
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:  # `from pkg import name` names a module or an attribute of one
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _room(mod: str) -> str:
    for room in sorted(RANKS, key=len, reverse=True):
        if mod == room or mod.startswith(room + "."):
            if room == "streamer" and mod.count(".") > 1:
                continue
            return room
    raise AssertionError(mod)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_rooms_import_only_down():
    bad = []
    for mod, deps in _graph().items():
        for dep in deps:
            a, b = _room(mod), _room(dep)
            if a != b and RANKS[b] >= RANKS[a] and dep != "streamer":
                bad.append(f"{mod} -> {dep}")
    assert not bad, "imports against the room order:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_readme_layout_names_every_room_and_module():
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout"):]
    layout = layout[: layout.index("```", layout.index("```") + 3)]
    missing = []
    for room in ("pipeline", "lifecycle", "ops", "dev"):
        if f"{room}/" not in layout:
            missing.append(f"{room}/")
        for path in sorted((ROOT / "streamer" / room).glob("*.py")):
            if path.stem != "__init__" and path.stem not in layout:
                missing.append(f"streamer/{room}/{path.name}")
    for path in sorted((ROOT / "streamer").glob("*.py")):
        if not path.stem.startswith("__") and path.stem not in layout:
            missing.append(f"streamer/{path.name}")
    assert not missing, f"README layout misses: {missing}"


def test_every_log_call_passes_a_dict_event():
    """One logging style: ``log.info({"event": ...})`` (JSON lines through streamer.pipeline.logs), never %-strings."""
    bad = []
    for path in sorted((ROOT / "streamer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "log" and node.func.attr in ("debug", "info", "warning", "error", "exception")):
                if not (node.args and isinstance(node.args[0], ast.Dict)):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.BoolOp):  # (log.info if ok else log.error)({...})
                if not (node.args and isinstance(node.args[0], ast.Dict)):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"log calls without a dict event: {bad}"


def test_no_private_imports_across_rooms():
    """A room uses another room's public names only (``from offline_train.data import _dataset`` was one)."""
    mods = _modules()
    bad = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                target = node.module
                if target.split(".")[0] not in ("streamer", "offline_train") or _room(target) == _room(name):
                    continue
                bad += [f"{name}: from {target} import {a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad


def test_no_folder_shadows_a_module():
    """``offline_train/data/`` beside ``offline_train/data.py`` made ``data`` mean two things."""
    clash = [str(p.relative_to(ROOT)) for pkg in ("streamer", "offline_train") for p in (ROOT / pkg).rglob("*.py")
             if p.with_suffix("").is_dir()]
    assert not clash, clash


def test_bundled_demo_data_is_package_data():
    from offline_train.data import BUNDLED_CARDIO

    assert BUNDLED_CARDIO.is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"{BUNDLED_CARDIO.parent.name}/*.parquet"' in pyproject


def test_the_tree_passes_the_linter():
    """``ruff check .`` (pyproject's rules) on the whole tree, diagnosis scripts included (ruff is a dev extra)."""
    import shutil
    import subprocess

    ruff = shutil.which("ruff")
    assert ruff, "ruff is missing: bash deploy/local/setup.sh installs the dev extras"
    r = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
