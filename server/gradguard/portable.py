"""Facts that cross a process: an analysis in a worker, its hover served by the server.

A syntax node in the facts is written as its stable id (`ids`), not as the node: the
receiver parses the same texts again (the file's, and those of the workspace modules the
analysis read), numbers them alike, and each id names the same place in its own trees.
So the facts arrive whole, the regions, backwards and values pointing into trees the
receiver owns, for the price of a parse.  Nodes of no numbered tree (a `with a, b:` split
into one statement per item by the engine) travel as themselves.
"""
from __future__ import annotations

import ast
import io
import pickle

from gradguard import ids
from gradguard.analysis import parse
from gradguard.facts import Facts


def dumps(facts: Facts) -> bytes:
    """`facts` as bytes that `loads` turns back into equal facts in any process."""
    sources = {"": facts.source, **{m.path: m.source for m in facts.modules}}
    out = io.BytesIO()
    pickle.dump(sources, out, protocol=pickle.HIGHEST_PROTOCOL)
    _Pickler(out, sources).dump(facts)
    return out.getvalue()


def loads(data: bytes) -> Facts:
    source = io.BytesIO(data)
    sources = pickle.load(source)
    return _Unpickler(source, sources).load()


class _Pickler(pickle.Pickler):
    def __init__(self, file, sources: dict):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.sources = sources

    def persistent_id(self, obj):
        if not isinstance(obj, ast.AST):
            return None
        node_id = getattr(obj, "gid", None)
        if node_id is None or "#" not in node_id or "/" in node_id.rpartition("#")[2] \
                or ids.module_of(node_id) not in self.sources:
            return None  # not a numbered node of the trees sent (a singleton operator, a node the engine made)
        return node_id


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, sources: dict):
        super().__init__(file)
        self.sources = sources
        self.indexes: dict = {}  # module -> ids.Index of the tree parsed again here

    def persistent_load(self, node_id: str) -> ast.AST:
        module = ids.module_of(node_id)
        index = self.indexes.get(module)
        if index is None:
            tree = parse(self.sources[module], module or "<string>")
            index = self.indexes[module] = ids.Index(ids.number(tree, module))
        return index[node_id]
