"""Imports: what a module's names lead to, and the workspace modules the engine reads.

`import x`, `from .models import Net` of a module of the user's project bind names whose values
the engine gets by running that module's definitions (`workspace_module`; its script code
does not run on import); anything else (torch, numpy, an installed package) binds a `Ref`
to the dotted name, which torch's semantics know or leave opaque.  A name imported lazily
(`lazy`) is read only when first used.  Following imports costs at most
`Limits.import_work` steps; past it the file is analysed again without them
(`ImportsTooSlow`).
"""
from __future__ import annotations

import ast

from gradguard.engine import binder
from gradguard.engine.context import Frame
from gradguard.engine.state import State
from gradguard.engine.values import Obj, Ref, const
from gradguard.workspace import top_imports

# What runs of a workspace module when it is imported: its definitions, not its script code.
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign)


class ImportsTooSlow(Exception):
    """Following the file's imports has done the work `Limits.import_work` allows: analyse it
    again without them."""


class Imports:
    """The interpreter's part that binds imported names and reads workspace modules (see the module)."""

    def imported(self, name: str, v, st: State, where):
        """`v`, or what a name imported from a workspace module is, read from the module the
        first time the name is used (and bound in its place: the heap object `where` holds the
        module's globals, None for a local): an import costs nothing until the code analysed
        touches what it brought."""
        scope = self.frame.globals if where is None else where
        for a in v:
            found = self.resolve_import(scope, a, st)
            if found is not None:
                if where is None:
                    st.env[name] = found
                else:
                    st.set_attr(where, name, found)
                return found
        return v

    def resolve_import(self, scope, atom, st: State):
        """What the lazily imported reference `atom`, bound in the globals `scope`, stands for
        in the workspace; None if it is no such reference or leads outside the workspace."""
        entry = self.cx.lazy.pop((scope, atom), None) if isinstance(atom, Ref) else None
        if entry is None:  # taken out while resolved: a cycle of imports meets it opaque
            return None
        found = self.import_now(*entry, st)
        if found is not None:
            self.cx.lazy[(scope, atom)] = entry  # other paths' states still hold the reference
        return found

    def import_now(self, module: str, level: int, importer: str, attr: str | None, st: State):
        """The namespace of `module` (attr None), or what it binds to `attr` (a submodule, if
        the module is a package that does not bind it)."""
        source = self.workspace_module(module, level, st, importer)
        if source is None or attr is None:
            return source
        ns = next(iter(source)).id
        v = st.get_attr(ns, attr)
        if v is not None and self.cx.lazy:  # the package's `__init__` imported it in turn
            v = self.imported(attr, v, st, ns)
        return v if v is not None else self.workspace_module(f"{module}.{attr}" if module else attr, level, st,
                                                            importer)

    def stmt_Import(self, s, st):
        for alias in s.names:
            if alias.asname:
                self.bind(alias.asname, self.lazy_import(alias.name, 0, None, alias.name), st)
            else:
                top = alias.name.split(".")[0]
                self.bind(top, self.lazy_import(top, 0, None, top), st)
        return st

    def stmt_ImportFrom(self, s, st):
        mod = s.module or ""
        for alias in s.names:
            dotted = f"{mod}.{alias.name}" if mod else alias.name
            if alias.name != "*":
                self.bind(alias.asname or alias.name, self.lazy_import(mod, s.level, alias.name, dotted), st)
                continue
            for name in self.cx.workspace.exported(self.current_file, mod, s.level) or () if self.cx.workspace else ():
                self.bind(name, self.lazy_import(mod, s.level, name, f"{mod}.{name}" if mod else name), st)
        return st

    def lazy_import(self, module: str, level: int, attr: str | None, dotted: str):
        """An opaque reference to the imported name, resolved into the workspace module (if
        it is one) where the name is first used (see `imported`)."""
        ref = Ref("." * level + dotted)
        if self.cx.workspace is not None:
            self.cx.lazy[(self.frame.globals, ref)] = (module, level, self.current_file, attr)
        return frozenset({ref})

    def workspace_module(self, name: str, level: int, st: State, importer: str | None = None):
        """The namespace of the workspace module an import names, its definitions run once
        (functions, classes, constants, its own imports; not its other top-level code), or
        None when the import leads outside the workspace (then it stays opaque)."""
        if self.cx.workspace is None:
            return None
        module = self.cx.workspace.resolve(importer or self.current_file, name, level)
        if module is None or module.path == self.cx.own_path:  # the file analysed is not a module of itself
            return None
        ns = self.cx.namespaces.get(module.path)
        if ns is not None:
            return frozenset({ns})
        if len(self.cx.namespaces) >= self.cx.limits.modules or self.cx.importing >= self.cx.limits.import_depth \
                or self.cx.foreign_budget < 0:
            return None
        ns = self.cx.namespaces[module.path] = Obj(("<module>", module.path), "namespace")
        self.cx.facts.add_module(module)
        st.set_attr(ns.id, "__name__", const(name))  # as this import names it (the parsed module is shared)
        self.cx.frames.append(Frame(None, (), is_module=True, module=module))
        self.cx.importing += 1
        statement, grad = self.cx.statement, st.grad
        out = st
        try:
            for stmt in module.tree.body:
                if isinstance(stmt, DEFINITIONS):
                    out = self.exec_stmt(stmt, out) or out
        finally:
            self.cx.importing -= 1
            self.cx.frames.pop()
            self.cx.statement = statement
        st.env, st.heap, st.grad = out.env, out.heap, grad  # the importer's state goes on from here
        return frozenset({ns})

    @property
    def reads_imports(self) -> bool:
        """Whether a name's use now reads the workspace module it was imported from: not while
        a decorator or base class is evaluated, nor in a function no module-level code called."""
        return bool(self.cx.lazy) and not (self.cx.caller_unknown or self.cx.definitions)

    def imported_stateful(self) -> frozenset:
        """The names this file imports from workspace modules that run a backward or a step
        (all the names a module defines, for one imported whole): a loop calling one runs
        its iterations one by one, as it would the file's own training step."""
        if self.cx.workspace is None:
            return frozenset()
        out = set()
        for module, level, names in top_imports(self.cx.tree):
            text = self.cx.workspace.text(self.cx.path, module, level)
            if text is not None and binder.STATEFUL.search(text):
                out |= set(names) if names else set(self.cx.workspace.exported(self.cx.path, module, level) or ())
        return frozenset(out)

    def loop_statefulness(self, module) -> binder.Statefulness:
        """Which lines of the analysed file (or of a workspace module) run a backward or a step."""
        if module is None:
            if self.cx.statefulness is None:
                self.cx.statefulness = binder.Statefulness(self.cx.source, self.cx.sites, self.imported_stateful())
            return self.cx.statefulness
        if module.path not in self.cx.statefulness_of:
            self.cx.statefulness_of[module.path] = binder.Statefulness(module.source, binder.functions(module.tree))
        return self.cx.statefulness_of[module.path]
