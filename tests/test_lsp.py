"""End-to-end: the real `gradguard lsp` over stdio, driven by pytest-lsp's client.

Two client profiles: Neovim 0.7 (diagnostics are pushed to it) and VS Code (it pulls them
with textDocument/diagnostic).  Each test speaks LSP to a fresh server process."""
from __future__ import annotations

import ast
import asyncio

import pytest
import pytest_lsp
from lsp_support import SERVER, apply_edits, workspace_edits
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

BUGGY = """\
import torch

x = torch.randn(3, requires_grad=True)
loss = (x.exp() * 2).sum()
loss.backward()
loss.backward()  # raises: the graph was freed
"""
CLEAN = BUGGY.replace("loss.backward()\nloss.backward()", "loss.backward(retain_graph=True)\nloss.backward()")
URI = "file:///tmp/gradguard-lsp-test/train.py"


def opened(client: LanguageClient, text: str, uri: str = URI, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


def changed(client: LanguageClient, text: str, version: int, uri: str = URI) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


async def published(client: LanguageClient, uri: str = URI, timeout: float = 20) -> list[types.Diagnostic]:
    """The next diagnostics published for `uri` (notifications for other documents are skipped)."""
    client.diagnostics.pop(uri, None)

    async def wait():
        while uri not in client.diagnostics:
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    await asyncio.wait_for(wait(), timeout)
    return list(client.diagnostics[uri])


@pytest_lsp.fixture(config=SERVER)
async def push(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=client_capabilities("neovim@v0.7.0")))
    yield
    await lsp_client.shutdown_session()


def pulling_capabilities() -> types.ClientCapabilities:
    """Neovim 0.11 pulls diagnostics (and prefers UTF-8 positions); add refresh support."""
    caps = client_capabilities("neovim@v0.11.0")
    caps.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    return caps


@pytest_lsp.fixture(config=SERVER)
async def pull(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=pulling_capabilities(), initialization_options={"gradguard": {"ignore": ["GG103"]}}))
    yield
    await lsp_client.shutdown_session()


async def test_open_publishes_a_diagnostic_at_the_failing_call(push: LanguageClient):
    opened(push, BUGGY)
    [diag] = await published(push)
    assert diag.code == "GG001" and diag.source == "gradguard"
    assert diag.severity == types.DiagnosticSeverity.Error
    assert diag.range.start == types.Position(line=5, character=0)
    assert diag.range.end == types.Position(line=5, character=15)
    assert diag.code_description.href.endswith("#gg001-freed-graph-backward")
    assert [r.location.range.start.line for r in diag.related_information] == [4, 3]
    assert "freed" in diag.related_information[0].message
    assert diag.data["fixes"] and diag.data["fixes"][0]["preferred"]


async def test_change_republishes_for_the_latest_version_only(push: LanguageClient):
    opened(push, CLEAN)
    assert await published(push) == []
    for version in range(2, 6):  # a burst of keystrokes: only the last text is analysed
        changed(push, BUGGY if version % 2 == 0 else CLEAN, version)
    changed(push, BUGGY, 6)
    diags = await published(push)
    while not diags or diags[0].data["version"] != 6:  # a loaded machine may see an earlier text analysed
        diags = await published(push)
    await asyncio.sleep(0.5)  # anything still in flight for an older version would arrive now
    assert [d.code for d in push.diagnostics[URI]] == ["GG001"]
    assert push.diagnostics[URI][0].data["version"] == 6


async def test_close_clears_diagnostics(push: LanguageClient):
    opened(push, BUGGY)
    assert await published(push)
    push.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=URI)))
    assert await published(push) == []


async def test_unparsable_text_keeps_the_last_diagnostics_and_logs_why(push: LanguageClient):
    opened(push, BUGGY)
    assert await published(push)
    changed(push, BUGGY + "for x in \n", 2)
    await asyncio.wait_for(push.wait_for_notification(types.WINDOW_LOG_MESSAGE), 20)
    assert any("syntax error" in m.message for m in push.log_messages)
    assert not push.messages  # nothing popped up on screen
    assert [d.code for d in push.diagnostics[URI]] == ["GG001"]
    changed(push, CLEAN, 3)  # fixed: the diagnostics go
    assert await published(push) == []


async def test_pull_diagnostics(pull: LanguageClient):
    opened(pull, BUGGY)
    report = await pull.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=URI)))
    assert [d.code for d in report.items] == ["GG001"]
    assert URI not in pull.diagnostics  # a pulling client is not also pushed to (no duplicates)
    changed(pull, CLEAN, 2)
    report = await pull.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=URI), previous_result_id=report.result_id))
    assert list(report.items) == []


async def test_configuration_from_initialization_and_changes(pull: LanguageClient):
    source = BUGGY + "w = torch.zeros(2, requires_grad=True)\nw += 1\n"
    opened(pull, source)
    params = types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=URI))
    codes = [d.code for d in (await pull.text_document_diagnostic_async(params)).items]
    assert codes == ["GG001", "GG003"]
    pull.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"gradguard": {"ignore": ["GG001"], "severity": {"GG003": "warning"}}}))
    await asyncio.sleep(0.3)
    items = (await pull.text_document_diagnostic_async(params)).items
    assert [(d.code, d.severity) for d in items] == [("GG003", types.DiagnosticSeverity.Warning)]
    assert pull.diagnostic_refresh_count >= 1  # the editor is told to pull again


async def test_hover_explains_the_finding_and_the_backward(push: LanguageClient):
    opened(push, BUGGY)
    [diag] = await published(push)
    hover = await push.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=5, character=6)))
    text = hover.contents.value
    assert "GG001" in text and "What happens at run time" in text and "Fixes" in text
    assert "retain_graph=True" in text and "gg001-freed-graph-backward" in text
    hover = await push.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=4, character=8)))
    assert "Frees those saved tensors" in hover.contents.value and "x.exp()" in hover.contents.value
    hover = await push.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=3, character=1)))
    assert "requires grad" in hover.contents.value


async def test_hover_tells_a_sure_fact_from_one_on_some_paths(push: LanguageClient):
    """A graph freed on one branch only is no error (nothing is reported) and hover says so."""
    text = ("import torch\n"
            "x = torch.randn(3, requires_grad=True)\n"
            "y = x.exp()\n"
            "if x.sum() > 0:\n"
            "    y.sum().backward()\n"
            "z = y * 2\n"
            "w = y.sum()\n"
            "w.backward()\n"
            "v = w * 2\n")
    opened(push, text)
    assert await published(push) == []

    async def hover(line, character):
        return (await push.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            position=types.Position(line=line, character=character)))).contents.value
    assert "Freed by an earlier backward on some paths only" in await hover(5, 4)
    surely = await hover(8, 4)
    assert "Freed by an earlier backward:" in surely and "on some paths" not in surely


async def test_code_actions_resolve_to_edits_that_fix_the_program(pull: LanguageClient):
    opened(pull, BUGGY)
    params = types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=URI))
    [diag] = (await pull.text_document_diagnostic_async(params)).items
    actions = await pull.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag])))
    preferred = [a for a in actions if a.is_preferred]
    assert len(preferred) == 1 and preferred[0].edit is None  # built lazily, on resolve
    assert any("noqa" in a.title for a in actions)
    resolved = await pull.code_action_resolve_async(preferred[0])
    fixed = apply_edits(BUGGY, workspace_edits(resolved.edit, URI))
    ast.parse(fixed)
    assert "loss.backward(retain_graph=True)" in fixed
    changed(pull, fixed, 2)
    assert list((await pull.text_document_diagnostic_async(params)).items) == []


async def test_noqa_action_suppresses(push: LanguageClient):
    opened(push, BUGGY)
    [diag] = await published(push)
    actions = await push.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag])))
    [noqa] = [a for a in actions if "noqa" in a.title]
    suppressed = apply_edits(BUGGY, workspace_edits(noqa.edit, URI))
    assert "# noqa: GG001" in suppressed.splitlines()[5]
    changed(push, suppressed, 2)
    assert await published(push) == []


@pytest.mark.parametrize("broken", ["", "\0", "def f(:\n", "x = '''\n", "\ufeffimport torch\n" + "(" * 200 + ")" * 200])
async def test_odd_documents_never_crash_the_server(push: LanguageClient, broken):
    opened(push, broken)
    opened(push, BUGGY, uri=URI + "2")
    assert [d.code for d in await published(push, URI + "2")] == ["GG001"]


@pytest_lsp.fixture(config=SERVER)
async def notebook_client(lsp_client: LanguageClient):
    caps = client_capabilities("neovim@v0.7.0")
    caps.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities())
    await lsp_client.initialize_session(types.InitializeParams(capabilities=caps))
    yield
    await lsp_client.shutdown_session()


async def test_notebook_cells_are_analysed_together(notebook_client: LanguageClient):
    """A tensor made in one cell and backpropagated twice in another: the diagnostic lands
    on the second cell's line."""
    nb = "file:///tmp/gradguard-lsp-test/train.ipynb"
    cells = ["import torch\nx = torch.randn(3, requires_grad=True)\nloss = (x.exp() * 2).sum()\n",
             "# markdown cells do not count\n",
             "loss.backward()\nloss.backward()\n"]
    kinds = [types.NotebookCellKind.Code, types.NotebookCellKind.Markup, types.NotebookCellKind.Code]
    uris = [f"vscode-notebook-cell:/tmp/gradguard-lsp-test/train.ipynb#C{i}" for i in range(3)]
    notebook_client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=nb, notebook_type="jupyter-notebook", version=1, cells=[
            types.NotebookCell(kind=k, document=u) for k, u in zip(kinds, uris)]),
        cell_text_documents=[types.TextDocumentItem(uri=u, language_id="python" if k == types.NotebookCellKind.Code
                                                    else "markdown", version=1, text=t)
                             for u, k, t in zip(uris, kinds, cells)]))
    diags = await published(notebook_client, uris[2])
    assert [(d.code, d.range.start.line) for d in diags] == [("GG001", 1)]
    assert notebook_client.diagnostics.get(uris[0]) == ()
    hover = await notebook_client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uris[2]), position=types.Position(line=1, character=3)))
    assert "GG001" in hover.contents.value


async def test_notebook_cells_are_pushed_even_to_pulling_clients(pull: LanguageClient):
    """VS Code does not pull notebook cells' diagnostics: they are pushed, and a pull for a
    cell answers with nothing, so nothing shows twice."""
    nb = "file:///tmp/gradguard-lsp-test/pulled.ipynb"
    uris = [f"vscode-notebook-cell:/tmp/gradguard-lsp-test/pulled.ipynb#C{i}" for i in range(2)]
    cells = ["import torch\nx = torch.randn(3, requires_grad=True)\nloss = (x.exp() * 2).sum()\n",
             "loss.backward()\nloss.backward()\n"]
    pull.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=nb, notebook_type="jupyter-notebook", version=1, cells=[
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=u) for u in uris]),
        cell_text_documents=[types.TextDocumentItem(uri=u, language_id="python", version=1, text=t)
                             for u, t in zip(uris, cells)]))
    diags = await published(pull, uris[1])
    assert [(d.code, d.range.start.line) for d in diags] == [("GG001", 1)]
    report = await pull.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uris[1])))
    assert list(report.items) == []


async def test_requests_for_documents_that_are_not_open(push: LanguageClient):
    """VS Code sends a change after closing an untitled document: no error, no crash."""
    gone = "untitled:Untitled-1"
    changed(push, BUGGY, 2, uri=gone)
    hover = await push.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=gone), position=types.Position(line=0, character=0)))
    assert hover is None
    report = await push.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=gone)))
    assert list(report.items) == []
    opened(push, BUGGY)
    assert [d.code for d in await published(push)] == ["GG001"]
    assert not push.messages


async def test_fix_all_source_action_applies_the_safe_confirmed_fixes(pull: LanguageClient):
    """`source.fixAll.gradguard` (for editor.codeActionsOnSave): the safe fixes only."""
    text = ("import torch\n"
            "w = torch.randn(3, requires_grad=True)\n"
            "for step in range(3):\n"
            "    loss = (w * torch.randn(3)).sum()\n"
            "    loss.backward()\n"
            "    w -= 0.1 * w.grad\n"
            "    w.grad = None\n"
            "x = torch.randn(3, requires_grad=True)\n"
            "y = (x.exp() * 2).sum()\n"
            "y.backward()\n"
            "y.backward()\n")
    opened(pull, text)
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.gradguard"]))
    [action] = await pull.text_document_code_action_async(params)
    assert action.kind == "source.fixAll.gradguard"
    fixed = apply_edits(text, workspace_edits(action.edit, URI))
    assert "    with torch.no_grad():\n        w -= 0.1 * w.grad\n" in fixed  # the safe fix
    assert fixed.endswith("y.backward()\ny.backward()\n")  # retain_graph=True is not safe: left for the user
    quick = await pull.text_document_code_action_async(types.CodeActionParams(
        text_document=params.text_document, range=params.range,
        context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.QuickFix])))
    assert not quick  # asked for quick fixes only, with no diagnostic: no action


async def test_a_bug_in_an_imported_module_is_reported_where_it_raises(push: LanguageClient, tmp_path):
    """The diagnostic is in train.py, its cause in features.py; editing features.py (not yet
    saved) re-publishes train.py's diagnostics."""
    from pathlib import Path

    from pygls.uris import from_fs_path

    project = Path(__file__).parent / "projects" / "cases" / "features_helper"
    for name in ("train.py", "features.py"):
        (tmp_path / name).write_text((project / "crash" / name).read_text())
    train, features = from_fs_path(str(tmp_path / "train.py")), from_fs_path(str(tmp_path / "features.py"))
    opened(push, (tmp_path / "train.py").read_text(), uri=train)
    [diag] = await published(push, train)
    assert diag.code == "GG001" and diag.range.start.line == 15
    cause = diag.related_information[-1].location
    assert cause.uri == features and cause.range.start == types.Position(line=5, character=11)
    opened(push, (tmp_path / "features.py").read_text(), uri=features)
    assert await published(push, features) == []
    push.diagnostics.pop(train, None)
    changed(push, (project / "fixed" / "features.py").read_text(), 2, uri=features)
    for _ in range(3):  # opening features.py re-published train.py too: wait for the change's turn
        if await published(push, train) == []:
            break
    assert list(push.diagnostics[train]) == []  # train.py reads the editor's text of features.py


async def test_the_server_reports_what_the_command_line_reports(push: LanguageClient):
    """Every corpus case and test program, opened in the server, gets the diagnostics the
    command line prints for the same file: same codes, ranges and messages."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from corpus_support import CORPUS, manifest
    from pygls.uris import from_fs_path

    programs = sorted((Path(__file__).parent / "programs" / "cases").glob("*.py"))
    files = [CORPUS / c["file"] for c in manifest()] + programs
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", "--format", "json",
                           *map(str, files)], capture_output=True, text=True)
    cli: dict = {}
    for r in json.loads(proc.stdout):
        cli.setdefault(str(Path(r["path"]).resolve()), set()).add((r["code"], r["line"] - 1, r["column"] - 1,
                                                                   r["message"]))
    for path in files:
        uri = from_fs_path(str(path.resolve()))
        push.diagnostics.pop(uri, None)
        push.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=path.read_text())))

        async def published():
            while uri not in push.diagnostics:
                await push.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
            return push.diagnostics[uri]
        served = {(d.code, d.range.start.line, d.range.start.character, d.message)
                  for d in await asyncio.wait_for(published(), 30)}
        assert served == cli.get(str(path.resolve()), set()), path.name
        push.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
