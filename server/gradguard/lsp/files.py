"""The workspace's files, open or not: workspace diagnostics and "check workspace".

VS Code pulls workspace diagnostics (`workspace/diagnostic`, LSP 3.17) as soon as a server
offers them, and again two seconds after each answer, so walking a large project is opt-in, as
with Pylance: with `diagnosticMode` "openFilesOnly" (the default) a pull walks nothing and
analyses nothing; it answers with what the last `gradguard.runWorkspaceCheck` found for the files
that are not open (the user asked for it; it stands until the file is opened, the settings
change, or the command runs again).  With "workspace", and for the command, each workspace
folder is walked as `gradguard check` walks a directory (`api.iter_python_files`, with the
folder's `exclude`).  A file that is not open is read from disk and analysed in a worker
process (`workers`), one at a time, so a walk keeps one worker busy at most and open
documents are analysed in the others; each within the `timeout` setting.  A file that could
not be read or analysed is reported with the GG000 diagnostic that says why.  A file is
analysed again only when its bytes, a module its analysis read, or its settings changed:
otherwise the last report stands, and a client that holds its result id is told it is
unchanged; so a pull after nothing changed costs a walk of the folders and a `stat` of each
file and module it read, no analysis.  An open document is reported from the text in the
editor (the document analyses' result).
Notebooks on disk are left out: their findings' lines are cells' lines, which only an open
notebook can show.

In both modes a file closed in the editor is reported empty until a walk reports it or it is
opened again: VS Code keeps the diagnostics of a document it pulled after it closes, for a
workspace report to replace.
"""
from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from gradguard.api import NOT_ANALYSED, Checked, NotReadable, iter_python_files, read_source
from gradguard.config import Config, ConfigError, Configs
from gradguard.encoding import decode
from gradguard.lsp.convert import diagnostic, reported
from gradguard.spans import split_lines

Report = types.WorkspaceDocumentDiagnosticReport


@dataclass
class FileReport:
    """The last analysis of a file that is not open."""

    uri: str
    key: tuple  # what it depends on: settings, the file's and the imported modules' stamps
    modules: tuple[str, ...]  # the modules the analysis read
    result_id: str
    items: list[types.Diagnostic]  # with a GG000 one if the file was not analysed


@dataclass
class Setup:
    """What the files of a directory are analysed with, worked out once a walk."""

    config: Config
    text: str  # repr(config): part of each file's key
    problem: str | None  # why the configuration was ignored: logged once a walk, if a file is analysed with it


@dataclass
class Summary:
    """What a "check workspace" found: files checked, findings, files that could not be checked."""

    files: int = 0
    findings: int = 0
    errors: int = 0

    def count(self, items: list[types.Diagnostic]) -> None:
        """One file more, with its diagnostics: findings, or a GG000 (not checked)."""
        failed = sum(item.code == NOT_ANALYSED for item in items)
        self.files += 1
        self.findings += len(items) - failed
        self.errors += bool(failed)

    def json(self) -> dict:
        return {"files": self.files, "findings": self.findings, "errors": self.errors}


class WorkspaceFiles:
    def __init__(self, server):
        self.server = server  # the GradGuardServer: its documents, analyses and settings
        self.reports: dict[str, FileReport] = {}  # file path -> its last report
        self.lock = asyncio.Lock()  # one walk at a time: a command and a pull never analyse a file twice
        self.kept: dict[str, Report] = {}  # URI -> what the last command found, for a file not open
        self.closed: set[str] = set()  # URIs of documents closed (and not opened again)
        self._counter = 0

    async def pulled(self, previous: dict[str, str]) -> list[Report]:
        """The answer to `workspace/diagnostic`; `previous`: the client's result ids by URI."""
        if await self.server.settings.mode() == "workspace":
            reports, _ = await self.check(previous)
        else:
            reports = self._kept(previous)
        reported = {report.uri for report in reports}
        return reports + [types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=[], version=None)
                          for uri in sorted(self.closed - reported)]

    async def check_all(self) -> tuple[list[Report], Summary]:
        """`gradguard.runWorkspaceCheck`: every file, whatever the mode; what it finds in the files
        that are not open is kept for the pulls of "openFilesOnly"."""
        reports, summary = await self.check({})
        docs = self.server.workspace.text_documents
        self.kept = {r.uri: r for r in reports if r.uri not in docs and r.result_id is not None}
        return reports, summary

    def opened(self, uri: str) -> None:
        self.closed.discard(uri)

    def closed_document(self, uri: str) -> None:
        if not uri.startswith("untitled:"):  # VS Code clears an untitled document's diagnostics itself
            self.closed.add(uri)
        self.kept.pop(uri, None)  # its text may have changed while open: a report from before would be stale

    def _kept(self, previous: dict[str, str]) -> list[Report]:
        """"openFilesOnly": the command's reports, and an empty one for each file the client holds
        a report of that is neither kept nor open (an answer from "workspace" mode, say)."""
        docs = self.server.workspace.text_documents
        out: list[Report] = [
            types.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, result_id=report.result_id, version=None)
            if previous.get(uri) == report.result_id else report
            for uri, report in self.kept.items() if uri not in docs]
        out += [types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=[], version=None)
                for uri in sorted(set(previous) - set(self.kept) - set(docs))]
        return out

    def folders(self) -> list[Path]:
        ws = self.server.workspace
        uris = [folder.uri for folder in ws.folders.values()] or ([ws.root_uri] if ws.root_uri else [])
        paths = [to_fs_path(uri) for uri in uris if uri.startswith("file:")]
        return [Path(p) for p in paths if p and os.path.isdir(p)]

    async def check(self, previous: dict[str, str]) -> tuple[list[Report], Summary]:
        """A report per Python file of the workspace folders; `previous`: the client's result
        ids by URI (a file whose result id it holds is reported unchanged)."""
        async with self.lock:
            return await self._check(previous)

    async def _check(self, previous: dict[str, str]) -> tuple[list[Report], Summary]:
        server = self.server
        open_docs = {_resolved(state.path): uri for uri, state in server.analyses.docs.items() if state.path}
        load = Configs()  # a walk reads each pyproject.toml once
        configs: dict[tuple, Setup] = {}  # (directory, settings) -> what a file there is analysed with
        stamp = functools.lru_cache(maxsize=None)(_stamp)  # a walk stats each module once, however many import it
        out: list[Report] = []
        summary = Summary()
        seen: set[str] = set()
        for path, key_path in self._files(load):
            if key_path in seen:
                continue
            seen.add(key_path)
            uri = open_docs.get(key_path)
            if uri is not None:
                report = await self._open(uri, previous.get(uri))
                if report is not None:
                    out.append(report)
                    summary.count(server.diagnostics(uri))
                continue
            old = self.reports.get(key_path)
            uri = old.uri if old is not None else from_fs_path(str(path)) or str(path)
            settings = await server.settings.get(uri)
            ckey = (path.parent, repr(sorted(settings.items())))
            if ckey not in configs:
                config, problem = server.analyses.config_for(str(path), settings, load)
                configs[ckey] = Setup(config, repr(config), problem)
            report = await self._file(path, key_path, uri, configs[ckey], stamp)
            summary.count(report.items)
            if previous.get(uri) == report.result_id:
                out.append(types.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, result_id=report.result_id,
                                                                            version=None))
            else:
                out.append(types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=report.items, version=None,
                                                                       result_id=report.result_id))
        for gone in set(self.reports) - seen:  # deleted, excluded, or outside the folders now: cleared once
            out.append(types.WorkspaceFullDocumentDiagnosticReport(uri=self.reports.pop(gone).uri, items=[],
                                                                   version=None))
        return out, summary

    def _files(self, load: Configs) -> Iterator[tuple[Path, str]]:
        """Each `.py` file of the folders, and its resolved path (each directory resolved once)."""
        real: dict[str, str] = {}
        for folder in self.folders():
            try:
                config = load(folder)  # its `exclude`
            except ConfigError:  # each file's check says why
                config = Config()
            for path in iter_python_files([folder], config):
                if path.suffix != ".py":
                    continue
                name = str(path)
                if os.path.islink(name):
                    yield path, _resolved(name)
                    continue
                directory, base = os.path.split(name)
                if directory not in real:
                    real[directory] = _resolved(directory)
                yield path, os.path.join(real[directory], base)

    async def _open(self, uri: str, previous_id: str | None) -> Report | None:
        server = self.server
        last = await server.analyses.settled(uri)
        doc = server.workspace.text_documents.get(uri)
        if last is None or doc is None or last.version != doc.version:
            return None  # closed, changed or out of sync meanwhile: the document pull reports it
        if previous_id == last.result_id:
            return types.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, result_id=last.result_id,
                                                                    version=doc.version)
        return types.WorkspaceFullDocumentDiagnosticReport(uri=uri, items=server.diagnostics(uri),
                                                           version=doc.version, result_id=last.result_id)

    async def _file(self, path: Path, key_path: str, uri: str, setup: Setup,
                    stamp: Callable[[str], tuple | None]) -> FileReport:
        old = self.reports.get(key_path)
        if old is not None and old.key == self._key(path, old.modules, setup, stamp):
            return old
        if setup.problem:
            self.server.log(f"gradguard: configuration ignored: {setup.problem}")
            setup.problem = None
        text = ""
        try:
            text = decode(read_source(path))
        except NotReadable as exc:  # not a regular file, too big, or unreadable
            checked = Checked(str(path)).failed(str(exc))
        except (SyntaxError, UnicodeDecodeError, LookupError) as exc:  # bad coding cookie, bytes or codec
            checked = Checked(str(path)).failed(f"cannot decode: {' '.join(str(exc).split())}")
        else:
            checked, _ = await self.server.analyses.check(text, str(path), setup.config, facts=False)
        if checked.error:
            self.server.log(f"gradguard: {checked.error}")
        lines = split_lines(text)
        codec = self.server.workspace.position_codec
        self._counter += 1
        items = [diagnostic(f, uri, None, codec, lines) for f in reported(checked)]
        report = FileReport(uri, self._key(path, checked.modules, setup, stamp), checked.modules,
                            f"file-{self._counter}", items)
        self.reports[key_path] = report
        return report

    def _key(self, path: Path, modules: tuple[str, ...], setup: Setup, stamp: Callable[[str], tuple | None]) -> tuple:
        overlay = self.server.analyses.workspace.overlay  # modules open in the editor: their text counts
        return setup.text, stamp(str(path)), tuple(
            ("open", hash(overlay[m])) if m in overlay else stamp(m) for m in modules)


def _stamp(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _resolved(path: str) -> str:
    return str(Path(path).resolve())
