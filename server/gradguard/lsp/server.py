"""`gradguard lsp`: the language server, a thin layer over the analysis library.

It keeps no analysis logic of its own: documents go to `gradguard.api.check_source`
(through `documents.Analyses`, which debounces and drops stale results), findings become
diagnostics (`convert`), fixes become code actions (`actions`), hovers read the
findings and facts (`hover`), and a pasted traceback goes to `gradguard.explain`.  Settings
are per workspace folder (`settings`); the folders' files that are not open are checked for
workspace diagnostics when `diagnosticMode` is "workspace", and by "check workspace" (`files`).
It never imports or runs the user's code and does not need torch.
"""
from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from gradguard import __version__
from gradguard.api import Checked
from gradguard.explain import NoTraceback, explain
from gradguard.lsp import actions, hover, notebooks
from gradguard.lsp.convert import diagnostic
from gradguard.lsp.documents import Analyses
from gradguard.lsp.files import WorkspaceFiles
from gradguard.lsp.settings import FolderSettings
from gradguard.lsp.text import LspWorkspace
from gradguard.spans import split_lines

class Protocol(LanguageServerProtocol):
    """pygls's protocol, tolerant of editors that send changes after closing a document
    (VS Code does for an untitled one closed with "Don't Save")."""

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        if params.text_document.uri not in self.workspace.text_documents:
            return
        yield from super().lsp_text_document__did_change(params)

    def use_lsp_lines(self) -> None:
        """Keep documents that split lines as LSP does (`text`); called on `initialize`,
        before any document is open."""
        self._workspace = LspWorkspace.like(self.workspace, SYNC)


EXPLAIN_COMMAND = "gradguard.explain"  # workspace/executeCommand: explain a pasted traceback
SYNC = types.TextDocumentSyncKind.Incremental
PULL = types.DiagnosticOptions(identifier="gradguard", inter_file_dependencies=False, workspace_diagnostics=True)
CHECK_WORKSPACE_COMMAND = "gradguard.runWorkspaceCheck"  # workspace/executeCommand: check every file of the folders


class GradGuardServer(LanguageServer):
    def __init__(self):
        super().__init__(
            "gradguard", __version__, text_document_sync_kind=SYNC,
            notebook_document_sync=types.NotebookDocumentSyncOptions(notebook_selector=[
                types.NotebookDocumentFilterWithCells(
                    notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")])]),
            protocol_cls=Protocol)
        self.analyses = Analyses(log_error=lambda message: self.log(message, types.MessageType.Error))
        self.settings = FolderSettings(lambda: [f.uri for f in self.workspace.folders.values()], self.log)
        self.analyses.settings_of = self.settings.get
        self.files = WorkspaceFiles(self)  # the folders' files, for workspace diagnostics
        self.workspace_pulled = False  # the client has pulled workspace diagnostics (VS Code does, unasked)
        self.pull = False  # the client asks for diagnostics (textDocument/diagnostic) instead of receiving them
        self.resolvable = False  # the client resolves code actions' edits lazily
        self.cells: dict[str, list[str]] = {}  # notebook URI -> its cells' URIs, as last analysed

    # ------------------------------------------------------------------ helpers
    def log(self, message: str, kind=types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def analyse(self, uri: str) -> None:
        """Schedule an analysis of a text document, or of the notebook a cell belongs to."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            text, starts, uris = notebooks.joined(self.workspace, notebook)
            self.analyses.schedule(notebook.uri, notebook.version, text, _path(notebook.uri),
                                   lambda nb, _version, checked, _problem: self.done_notebook(nb, uris, checked),
                                   cells=starts)
            return
        doc = self.workspace.get_text_document(uri)
        self.analyses.schedule(uri, doc.version, doc.source, _path(uri), self.done)
        path = _path(uri)
        for other in self.analyses.importers(path) if path else ():  # they read this module: analyse them again
            if other != uri and other in self.workspace.text_documents:
                dep = self.workspace.get_text_document(other)
                self.analyses.schedule(other, dep.version, dep.source, _path(other), self.done)

    def done(self, uri: str, version, checked: Checked, problem: str | None) -> None:
        if problem:
            self.log(f"gradguard: configuration ignored: {problem}", types.MessageType.Warning)
        if checked.error:
            # Half-typed code: keep what the editor shows and say why in the log, not on screen.
            self.log(f"gradguard: {checked.error}")
            return
        if not self.pull:
            self.publish(uri, version)

    def done_notebook(self, notebook_uri: str, uris: list[str], checked: Checked) -> None:
        if checked.error:
            self.log(f"gradguard: {checked.error}")
            return
        self.cells[notebook_uri] = uris
        # Cells' diagnostics are pushed to every client (VS Code does not pull them); a pull
        # for a cell answers with nothing, so nothing shows twice.
        for cell_uri, items in notebooks.diagnostics(self.workspace, checked, uris).items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=items))

    def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        state = self.analyses.docs.get(uri)
        good = state.good if state else None
        if good is None:
            return []
        doc = self.workspace.get_text_document(uri)
        lines = split_lines(good.text)
        return [diagnostic(f, uri, good.version, doc.position_codec, lines) for f in good.checked.findings]

    def publish(self, uri: str, version) -> None:
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=version, diagnostics=self.diagnostics(uri)))

    async def configuration(self, scope_uri: str | None):
        """The client's "gradguard" section for a document, or the window's (`workspace/configuration`)."""
        [answer] = await asyncio.wait_for(self.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(scope_uri=scope_uri, section="gradguard")])), 10)
        return answer

    def reanalyse_all(self) -> None:
        for uri in list(self.analyses.docs):
            if uri in self.workspace.text_documents:
                self.analyse(uri)
        if self.pull and _refresh_supported(self.client_capabilities):
            self.workspace_diagnostic_refresh(None)


server = GradGuardServer()


def _path(uri: str) -> str | None:
    try:
        return to_fs_path(uri) if uri.startswith("file:") else None
    except Exception:  # an odd URI is no reason to fail: the file is analysed without a pyproject
        return None


def _refresh_supported(caps: types.ClientCapabilities) -> bool:
    ws = caps.workspace
    return bool(ws and ws.diagnostics and ws.diagnostics.refresh_support)


@server.feature(types.INITIALIZE)
def initialize(ls: GradGuardServer, params: types.InitializeParams):
    caps = params.capabilities
    ls.pull = bool(caps.text_document and caps.text_document.diagnostic)
    resolve = caps.text_document and caps.text_document.code_action and \
        caps.text_document.code_action.resolve_support
    ls.resolvable = bool(resolve and "edit" in resolve.properties)
    ls.settings.changed(params.initialization_options)
    if caps.workspace and caps.workspace.configuration:
        ls.settings.ask = ls.configuration
    ls.protocol.use_lsp_lines()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: GradGuardServer, params: types.DidOpenTextDocumentParams):
    ls.files.opened(params.text_document.uri)
    ls.analyse(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: GradGuardServer, params: types.DidChangeTextDocumentParams):
    if params.text_document.uri in ls.workspace.text_documents:
        ls.analyse(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: GradGuardServer, params: types.DidCloseTextDocumentParams):
    uri = params.text_document.uri
    ls.analyses.close(uri)
    ls.files.closed_document(uri)
    if not ls.pull:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_open(ls: GradGuardServer, params: types.DidOpenNotebookDocumentParams):
    for cell in params.cell_text_documents:
        ls.analyse(cell.uri)
        break


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_change(ls: GradGuardServer, params: types.DidChangeNotebookDocumentParams):
    notebook = ls.workspace.get_notebook_document(notebook_uri=params.notebook_document.uri)
    if notebook is not None and notebook.cells:
        ls.analyse(notebook.cells[0].document)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def notebook_close(ls: GradGuardServer, params: types.DidCloseNotebookDocumentParams):
    ls.analyses.close(params.notebook_document.uri)
    for cell in params.cell_text_documents:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell.uri, diagnostics=[]))


@server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC, PULL)
async def pull_diagnostics(ls: GradGuardServer, params: types.DocumentDiagnosticParams):
    uri = params.text_document.uri
    if uri not in ls.workspace.text_documents:  # closed meanwhile: nothing to report
        return types.RelatedFullDocumentDiagnosticReport(items=[])
    if ls.workspace.get_notebook_document(cell_uri=uri) is not None:
        return types.RelatedFullDocumentDiagnosticReport(items=[])  # pushed (see done_notebook)
    if uri not in ls.analyses.docs:
        ls.analyse(uri)
    good = await ls.analyses.settled(uri)
    doc = ls.workspace.get_text_document(uri)
    if good is not None and good.version != doc.version and params.previous_result_id == good.result_id:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=good.result_id)
    if good is None or good.version != doc.version:
        return types.RelatedFullDocumentDiagnosticReport(items=[])  # the text no longer parses
    return types.RelatedFullDocumentDiagnosticReport(items=ls.diagnostics(uri), result_id=good.result_id)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: GradGuardServer, params: types.DidChangeConfigurationParams):
    ls.settings.changed(params.settings)
    ls.files.kept.clear()  # found with the old settings
    ls.reanalyse_all()


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, actions.FIX_ALL], resolve_provider=True))
async def code_action(ls: GradGuardServer, params: types.CodeActionParams):
    uri = params.text_document.uri
    if uri not in ls.workspace.text_documents:
        return []
    settings = await ls.settings.get(uri)
    if uri not in ls.workspace.text_documents:
        return []
    doc = ls.workspace.get_text_document(uri)
    config, _ = ls.analyses.config_for(doc.path, settings)
    return actions.code_actions(doc, params, ls.resolvable, config, ls.analyses.workspace)


@server.feature(types.CODE_ACTION_RESOLVE)
def code_action_resolve(ls: GradGuardServer, action: types.CodeAction):
    data = action.data if isinstance(action.data, dict) else {}
    if "uri" not in data or data["uri"] not in ls.workspace.text_documents:
        return action
    return actions.resolve(ls.workspace.get_text_document(data["uri"]), action)


@server.command(actions.FIX_ALL_COMMAND)
async def apply_fix_all(ls: GradGuardServer, target=None):
    """An editor's "fix all in this file": `{"uri", "version", "unsafe"}`.  The fixes
    `source.fixAll.gradguard` would make (unsafe ones too if asked) are sent back as a
    `workspace/applyEdit`; the answer says how many were applied, or why none was."""
    target = target if isinstance(target, dict) else {}
    uri = target.get("uri")
    if uri not in ls.workspace.text_documents:
        return {"applied": 0, "reason": f"{uri} is not open"}
    doc = ls.workspace.get_text_document(uri)
    if target.get("version") is not None and target["version"] != doc.version:
        return {"applied": 0, "reason": "the document changed since the command was given"}
    config, _ = ls.analyses.config_for(doc.path, await ls.settings.get(uri))
    made = actions.fix_all_edit(doc, config, unsafe=bool(target.get("unsafe")), workspace=ls.analyses.workspace)
    if made is None:
        return {"applied": 0, "reason": "nothing to fix"}
    edit, count = made
    result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="GradGuard: fix all"))
    if not result.applied:
        return {"applied": 0, "reason": result.failure_reason or "the editor refused the edit"}
    return {"applied": count}


@server.feature(types.WORKSPACE_DIAGNOSTIC)
async def workspace_diagnostics(ls: GradGuardServer, params: types.WorkspaceDiagnosticParams):
    """With `diagnosticMode` "workspace", every Python file of the workspace folders (`files`):
    open ones from the editor's text; else what the last "check workspace" found."""
    ls.workspace_pulled = True
    previous = {p.uri: p.value for p in params.previous_result_ids}
    return types.WorkspaceDiagnosticReport(items=await ls.files.pulled(previous))


@server.command(CHECK_WORKSPACE_COMMAND)
async def check_workspace(ls: GradGuardServer, *_):
    """An editor's "check workspace": every Python file of the workspace folders is checked, in
    either `diagnosticMode`.  A client that pulls workspace diagnostics is asked to pull again (the
    next pull answers with these reports, in "openFilesOnly" mode too); any other gets the files
    that are not open published.  The answer counts the files, findings and files not checked."""
    reports, summary = await ls.files.check_all()
    if ls.workspace_pulled:
        if _refresh_supported(ls.client_capabilities):
            ls.workspace_diagnostic_refresh(None)
    else:
        for report in reports:
            if report.uri not in ls.workspace.text_documents:
                ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                    uri=report.uri, diagnostics=report.items))
    return summary.json()


@server.command(EXPLAIN_COMMAND)
async def explain_traceback(ls: GradGuardServer, target=None):
    """An editor's "explain this traceback": the text itself, or `{"text": ...}`.  The answer is
    what `gradguard explain --format json` prints plus `markdown` to show, or `{"error": ...}`
    when the text holds no exception.  Files are looked for as the traceback names them, from
    the workspace's root, and by the end of their path under each workspace folder."""
    text = target.get("text") if isinstance(target, dict) else target
    if not isinstance(text, str):
        return {"error": "no traceback given: the argument is its text, or {\"text\": ...}"}
    folders = [Path(path) for folder in ls.workspace.folders.values() for path in [_path(folder.uri)] if path]
    cwd = Path(ls.workspace.root_path) if ls.workspace.root_path else (folders[0] if folders else Path.cwd())
    job = functools.partial(explain, text, cwd=cwd, roots=folders or [cwd],
                            config_for=lambda path: ls.analyses.config_for(str(path), {})[0])
    try:  # on the analyses' worker: the event loop stays free, and one analysis runs at a time
        explanation = await asyncio.get_running_loop().run_in_executor(ls.analyses.pool, job)
    except NoTraceback as exc:
        return {"error": str(exc)}
    return {**explanation.to_dict(), "markdown": explanation.markdown()}


@server.feature(types.TEXT_DOCUMENT_HOVER)
async def on_hover(ls: GradGuardServer, params: types.HoverParams):
    uri = params.text_document.uri
    if uri not in ls.workspace.text_documents:
        return None
    doc = ls.workspace.get_text_document(uri)
    pos = doc.position_codec.position_from_client_units(doc.lines, params.position)
    line, column = pos.line + 1, pos.character
    notebook = ls.workspace.get_notebook_document(cell_uri=uri)
    if notebook is not None:  # a cell: its lines are a stretch of the notebook's joined module
        good = await ls.analyses.settled(notebook.uri)
        uris = ls.cells.get(notebook.uri, [])
        if good is None or good.version != notebook.version or uri not in uris:
            return None
        starts = {cell: start for start, cell in good.checked.cells}
        if uris.index(uri) + 1 not in starts:
            return None
        line += starts[uris.index(uri) + 1] - 1
    else:
        good = await ls.analyses.settled(uri)
        if good is None or good.version != doc.version:
            return None
    text = next((hover.finding_markdown(f, good.checked.cells) for f in good.checked.findings
                 if hover.contains(f.span, line, column)), None)
    if text is None and good.checked.facts is not None:
        text = hover.facts_markdown(good.checked.facts, line, column)
    if text is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))


def main() -> int:
    server.start_io()
    return 0

