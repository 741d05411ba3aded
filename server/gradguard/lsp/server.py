"""`gradguard lsp`: the language server, a thin layer over the analysis library.

It keeps no analysis logic of its own: documents go to `gradguard.api.check_source` in
worker processes (`workers`, through `documents.Analyses`, which debounces and drops stale
results), findings become diagnostics (`convert`) and what kept a document from being
analysed a GG000 diagnostic, fixes become code actions (`actions`), hovers read the findings
and the facts the analysis sent (`hover`), and a pasted traceback goes to
`gradguard.explain`.  Settings are per workspace folder (`settings`); the folders' files that
are not open are checked for workspace diagnostics when `diagnosticMode` is "workspace", and
by "check workspace" (`files`).
It never imports or runs the user's code and does not need torch.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import traceback
from pathlib import Path

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import (
    FeatureNotificationError,
    FeatureRequestError,
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcServerNotInitialized,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCRequest
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from gradguard import __version__
from gradguard.api import Checked, failure
from gradguard.explain import NoTraceback, explain
from gradguard.findings import Finding
from gradguard.lsp import actions, hover, notebooks
from gradguard.lsp.convert import diagnostic, reported
from gradguard.lsp.documents import Analyses
from gradguard.lsp.files import WorkspaceFiles
from gradguard.lsp.settings import FolderSettings
from gradguard.lsp.text import LspWorkspace
from gradguard.spans import split_lines


class Protocol(LanguageServerProtocol):
    """pygls's protocol, held to the LSP specification where pygls is not (each case is tested
    in tests/test_lsp_lifecycle.py):

    - a request whose params do not have the method's shape is answered InvalidParams (pygls
      answered nothing, so the client waited forever, and showed an error dialog); such a
      notification is logged and ignored;
    - a request after `shutdown` is answered InvalidRequest (pygls dropped it), one before
      `initialize` ServerNotInitialized (pygls failed it with an internal error);
    - `exit` ends the process with code 0 after `shutdown`, else 1 (`exit_code`: pygls's
      `sys.exit` was swallowed by its own loop, so it was always 0);
    - a message that is not JSON or not JSON-RPC is logged, never shown in a dialog
      (`GradGuardServer.report_server_error`);
    - a notification's handler is forgotten once it has run (`_handle_notification`: pygls
      kept the future of each one run as a generator, didOpen, didChange and didClose among
      them, for as long as the server ran: memory grew with every keystroke).

    It also tolerates changes sent after closing a document (VS Code sends them for an
    untitled one closed with "Don't Save").
    """

    initialized = False  # `initialize` was received

    @property
    def exit_code(self) -> int:
        return 0 if self._shutdown else 1

    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:  # a message of a known method whose params pygls cannot read
            return Unreadable(data.get("id"), data.get("method"), _reason(exc.__cause__ or exc))

    def handle_message(self, message) -> None:
        if isinstance(message, Unreadable):
            self._refuse(message.id, message.method, JsonRpcInvalidParams(f"invalid params: {message.reason}"))
            return
        if not isinstance(getattr(message, "jsonrpc", None), str):  # JSON, but no JSON-RPC 2.0 message
            data = message if isinstance(message, dict) else {}
            self._refuse(data.get("id"), data.get("method"), JsonRpcInvalidRequest("not a JSON-RPC 2.0 message"))
            return
        method = getattr(message, "method", None)
        if isinstance(message, RPCRequest):
            if self._shutdown:
                self._refuse(message.id, method, JsonRpcInvalidRequest("the server is shut down: only 'exit' follows"))
                return
            if not self.initialized and method != types.INITIALIZE:
                self._refuse(message.id, method, JsonRpcServerNotInitialized("the server is not initialized yet"))
                return
            self.initialized = True
        elif not self.initialized and method not in (types.EXIT, None):
            self._server.log(f"gradguard: {method} before initialize ignored")
            return
        super().handle_message(message)

    def _handle_notification(self, method_name: str, params) -> None:
        kept = set(self._request_futures)
        super()._handle_notification(method_name, params)
        for key in set(self._request_futures) - kept:  # only requests' futures are ever removed
            self._request_futures[key].add_done_callback(lambda _, key=key: self._request_futures.pop(key, None))

    def _refuse(self, msg_id, method, error: JsonRpcException) -> None:
        """Answer a request with `error`; log a notification's (it has no answer)."""
        if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool):
            self._send_response(msg_id, error=error.to_response_error())
        else:
            self._server.log(f"gradguard: {method or 'a message'} ignored: {error.message}", types.MessageType.Warning)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        if params.text_document.uri not in self.workspace.text_documents:
            return
        yield from super().lsp_text_document__did_change(params)

    def use_lsp_lines(self, on_reject) -> None:
        """Keep documents that split lines as LSP does and reject changes outside them (`text`);
        called on `initialize`, before any document is open."""
        self._workspace = LspWorkspace.like(self.workspace, SYNC, on_reject)


class _OwnReport(logging.Filter):
    """Drops pygls's own report of a message it could not read or handle (a traceback on
    stderr): `GradGuardServer.report_server_error` logs it, in one line when it is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Unable to deserialize message", "Unable to handle message"))


for _name in ("pygls.protocol.json_rpc", "pygls.server"):
    logging.getLogger(_name).addFilter(_OwnReport())


class Unreadable:
    """A message whose params do not have its method's shape (`Protocol.structure_message`)."""

    def __init__(self, msg_id, method, reason: str):
        self.id, self.method, self.reason = msg_id, method, reason


def _reason(exc: BaseException) -> str:
    """Why params could not be read, in one line: each field that is wrong, where."""
    found = transform_error(exc) if isinstance(exc, ClassValidationError) else [str(exc)]
    text = " ".join("; ".join(found).split())
    return text if len(text) <= 300 else text[:299] + "…"


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

    def report_server_error(self, error: Exception, source) -> None:
        """What goes wrong outside a request (a message that is not JSON, a notification that
        failed) goes to the log: pygls showed each in an error dialog.  A failed request is
        answered with the error instead; a failure to send cannot be told to the client."""
        if source is FeatureRequestError:
            return
        if source is JsonRpcInternalError:
            print(f"gradguard: cannot write to the client: {error}", file=sys.stderr, flush=True)
            return
        if isinstance(error, json.JSONDecodeError):
            self.log(f"gradguard: a message that is not JSON was ignored: {error}", types.MessageType.Error)
        elif source is FeatureNotificationError:  # `error` holds the traceback
            self.log(f"gradguard: internal error handling a notification: {error}", types.MessageType.Error)
        else:
            self.log("gradguard: internal error handling a message:\n"
                     + "".join(traceback.format_exception(type(error), error, error.__traceback__)),
                     types.MessageType.Error)

    def shutdown(self) -> None:
        """The connection ends (after `exit`, or the client is gone): no analysis outlives it."""
        self.analyses.stop()
        super().shutdown()

    def rejected(self, uri: str, why: str) -> None:
        """A change to the document was rejected (`text`): it is out of sync until its whole text comes."""
        self.log(f"gradguard: {uri}: change rejected, document out of sync: {why}", types.MessageType.Warning)

    def analyse(self, uri: str) -> None:
        """Schedule an analysis of a text document, or of the notebook a cell belongs to; a
        document out of sync is not analysed: its diagnostic says so."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            stale = [cell.document for cell in notebook.cells
                     if self.workspace.get_text_document(cell.document).out_of_sync is not None]
            for cell_uri in stale:  # pushed to every client, as cells' diagnostics are
                self.publish(cell_uri, self.workspace.get_text_document(cell_uri).version)
            if stale:
                return
            text, starts, uris = notebooks.joined(self.workspace, notebook)
            self.analyses.schedule(notebook.uri, notebook.version, text, _path(notebook.uri),
                                   lambda nb, _, checked, problem: self.done_notebook(nb, uris, checked, problem),
                                   cells=starts)
            return
        doc = self.workspace.get_text_document(uri)
        if doc.out_of_sync is not None:
            if not self.pull:
                self.publish(uri, doc.version)
            return
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
            self.log(f"gradguard: {checked.error}")
        if not self.pull:
            self.publish(uri, version)

    def done_notebook(self, notebook_uri: str, uris: list[str], checked: Checked, problem: str | None) -> None:
        if checked.error:
            self.log(f"gradguard: {checked.error}")
        self.cells[notebook_uri] = uris
        # Cells' diagnostics are pushed to every client (VS Code does not pull them); a pull
        # for a cell answers with nothing, so nothing shows twice.
        for cell_uri, items in notebooks.diagnostics(self.workspace, checked, uris, config_failure(problem)).items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=items))

    def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        """The document's: its last analysis's findings, and a GG000 for what kept it from being
        analysed (or from being analysed with its settings); a GG000 alone when out of sync."""
        doc = self.workspace.get_text_document(uri)
        if doc.out_of_sync is not None:
            lines = split_lines(doc.source)
            finding = failure(Checked(uri).failed(f"document out of sync with the editor ({doc.out_of_sync}): "
                                                  f"close and reopen it"))
            return [diagnostic(finding, uri, doc.version, doc.position_codec, lines)]
        state = self.analyses.docs.get(uri)
        last = state.last if state else None
        if last is None:
            return []
        lines = split_lines(last.text)
        found = [*reported(last.checked), *config_failure(last.problem)]
        return [diagnostic(f, uri, last.version, doc.position_codec, lines) for f in found]

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


def config_failure(problem: str | None) -> list[Finding]:
    """GG000 for a broken configuration (`problem`), which the defaults replaced."""
    return [failure(Checked("").failed(f"configuration: {problem} (the defaults are used)"))] if problem else []


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
    ls.protocol.use_lsp_lines(ls.rejected)
    ls.analyses.workers.start()


@server.feature(types.SHUTDOWN)
def shutdown(ls: GradGuardServer, *_):
    ls.analyses.stop()  # nothing is published after the answer, and `exit` waits for no analysis


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
    while True:  # until the analysis of the text the editor has now (it may change meanwhile)
        doc = ls.workspace.text_documents.get(uri)
        if doc is None:
            return types.RelatedFullDocumentDiagnosticReport(items=[])  # closed meanwhile
        if doc.out_of_sync is not None:
            return types.RelatedFullDocumentDiagnosticReport(items=ls.diagnostics(uri))
        last = await ls.analyses.settled(uri)
        if last is None:
            return types.RelatedFullDocumentDiagnosticReport(items=[])  # closed meanwhile
        if last.version == doc.version:
            break
        if not ls.analyses.busy(uri):  # a change that scheduled nothing (it failed): it is now
            ls.analyse(uri)
    if params.previous_result_id == last.result_id:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=last.result_id)
    return types.RelatedFullDocumentDiagnosticReport(items=ls.diagnostics(uri), result_id=last.result_id)


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
    doc = ls.workspace.get_text_document(uri).snapshot()
    config, _ = ls.analyses.config_for(doc.path, settings)
    return await ls.analyses.run_local(actions.code_actions, doc, params, ls.resolvable, config, ls.analyses.workspace)


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
    doc = ls.workspace.get_text_document(uri).snapshot()
    if target.get("version") is not None and target["version"] != doc.version:
        return {"applied": 0, "reason": "the document changed since the command was given"}
    config, _ = ls.analyses.config_for(doc.path, await ls.settings.get(uri))
    made = await ls.analyses.run_local(actions.fix_all_edit, doc, config, bool(target.get("unsafe")),
                                       ls.analyses.workspace)
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
    try:
        explanation = await ls.analyses.run_local(job)
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
        last = await ls.analyses.settled(notebook.uri)
        uris = ls.cells.get(notebook.uri, [])
        if last is None or last.version != notebook.version or uri not in uris:
            return None
        starts = {cell: start for start, cell in last.checked.cells}
        if uris.index(uri) + 1 not in starts:
            return None
        line += starts[uris.index(uri) + 1] - 1
    else:
        last = await ls.analyses.settled(uri)
        if last is None or last.version != doc.version:
            return None
    text = next((hover.finding_markdown(f, last.checked.cells) for f in last.checked.findings
                 if hover.contains(f.span, line, column)), None)
    if text is None:
        try:
            text = hover.note_at(last.facts, line, column) if last.facts is not None else None
        except Exception:  # a bug reading the facts costs this hover, not the server
            ls.log(f"gradguard: internal error in a hover of {uri}:\n{traceback.format_exc()}", types.MessageType.Error)
            return None
    if text is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))


def main() -> int:
    server.start_io()
    return server.protocol.exit_code

