"""The Python package's own rule: no class reaches into another object's
private attributes. Every `x._name` in opt4store/*.py must be on `self`,
`cls`, or a module the file imports (its own private modules, such as
`_core` and `_values`); anything else is a class touching another's privates.
"""

import ast
import os

import opt4store

PACKAGE = os.path.dirname(os.path.abspath(opt4store.__file__))


def private_reaches(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.update(a.asname or a.name for a in node.names)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in modules):
            continue
        found.append(f"{os.path.basename(path)}:{node.lineno}: .{name} on {ast.unparse(owner)}")
    return found


def test_no_class_touches_another_objects_privates():
    found = []
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py"):
            found += private_reaches(os.path.join(PACKAGE, name))
    assert found == []


def test_the_check_catches_a_reach(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from . import _core\n"
                       "class A:\n"
                       "    def f(self, store):\n"
                       "        self._x = _core.thing\n"
                       "        return store._core.get\n")
    assert private_reaches(planted) == ["planted.py:5: ._core on store"]
