"""The binding's type stubs (python/cxlkv/_cxlkv.pyi, what mypy checks the
package against) agree with the built module: the same public names, and
each function's and method's parameters by name and order, read from the
signature line pybind11 writes into every docstring. A parameter added to
the binding but not to the stub (or the reverse) fails here."""
import ast
import os
import re
import unittest

from cxlkv import _cxlkv

STUB = os.path.join(os.path.dirname(__file__), os.pardir, "cxlkv", "_cxlkv.pyi")
# Present only in a binding built with the GPU data path.
CUDA_ONLY = {"GpuPath", "GpuCopyMethod", "KvTensor", "RegionGpuOptions", "RegionGpu"}


def _stub():
    """{name: node} of the stub's top level, and the names of its type aliases."""
    tree = ast.parse(open(STUB).read())
    names, aliases = {}, set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names, aliases


def _stub_params(fn):
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def _split_top(text):
    """Splits a parameter list at the commas outside brackets and <...> reprs."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def _runtime_params(obj):
    """Parameter names from pybind11's signature line, or None where it has
    none to read (overloads, or unnamed py::arg: arg0, arg1, ...)."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    first = doc.splitlines()[0] if doc else ""
    m = re.match(r"\w+\((.*)\) ->", first)
    if not m:
        return None
    names = [p.split(":")[0].strip() for p in _split_top(m.group(1))]
    names = [n for n in names if n not in ("*", "/")]
    if any(re.fullmatch(r"arg\d+", n) for n in names):
        return None
    return names


class StubTest(unittest.TestCase):
    def setUp(self):
        self.names, self.aliases = _stub()

    def test_the_same_public_names(self):
        runtime = {n for n in dir(_cxlkv) if not n.startswith("__")}
        stub = set(self.names)
        if not _cxlkv.HAVE_CUDA:
            stub -= CUDA_ONLY
        self.assertEqual(sorted(runtime - stub), [], "in the binding, missing from the stub")
        self.assertEqual(sorted(stub - runtime - {"__version__"}), [],
                         "in the stub, not in the binding")

    def test_the_same_parameters(self):
        checked = 0
        for name, node in self.names.items():
            if not hasattr(_cxlkv, name):
                continue
            obj = getattr(_cxlkv, name)
            if isinstance(node, ast.FunctionDef):
                members = [(name, node, obj)]
            elif isinstance(node, ast.ClassDef):
                members = [(f"{name}.{m.name}", m, getattr(obj, m.name, None)) for m in node.body
                           if isinstance(m, ast.FunctionDef) and not m.name.startswith("__")
                           and not any(isinstance(d, ast.Name) and d.id == "property"
                                       for d in m.decorator_list)]
            else:
                continue
            for qual, fn, rt in members:
                self.assertIsNotNone(rt, f"{qual}: in the stub, not in the binding")
                want = _runtime_params(rt)
                if want is None:
                    continue
                self.assertEqual(_stub_params(fn), want, f"{qual}: stub and binding differ")
                checked += 1
        self.assertGreaterEqual(checked, 15)  # the signatures were really read


if __name__ == "__main__":
    unittest.main()
