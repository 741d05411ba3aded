"""End-to-end: the real `gradguard lsp` over stdio, driven by pytest-lsp's client.

Two client profiles: Neovim 0.7 (diagnostics are pushed to it) and VS Code (it pulls them
with textDocument/diagnostic).  Each test speaks LSP to a fresh server process."""
from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

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


async def actions_for(client: LanguageClient, diag: types.Diagnostic) -> list:
    """The code actions offered for one diagnostic of the document at URI."""
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag])))

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


async def test_unparsable_text_gets_a_GG000_diagnostic_where_it_stops_parsing(push: LanguageClient):
    """Diagnostics describe the text the editor has: one that does not parse says so where
    (GG000, as the command line reports it), and its log line why; nothing pops up."""
    opened(push, BUGGY)
    assert await published(push)
    changed(push, BUGGY + "for x in \n", 2)
    [diag] = await published(push)
    assert (diag.code, diag.severity, diag.range.start.line + 1) == ("GG000", types.DiagnosticSeverity.Error, 7)
    assert diag.message.startswith("syntax error") and diag.data is not None and diag.data["version"] == 2
    assert any("syntax error" in m.message for m in push.log_messages)
    assert not push.messages  # nothing popped up on screen
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
    actions = await actions_for(pull, diag)
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
    actions = await actions_for(push, diag)
    [noqa] = [a for a in actions if "noqa" in a.title]
    suppressed = apply_edits(BUGGY, workspace_edits(noqa.edit, URI))
    assert "# noqa: GG001" in suppressed.splitlines()[5]
    changed(push, suppressed, 2)
    assert await published(push) == []


ODD = ["", "\0", "def f(:\n", "x = '''\n", "\ufeffimport torch\n" + "(" * 200 + ")" * 200]


async def test_odd_documents_never_crash_the_server(push: LanguageClient):
    """One server takes every odd document, each in its own file, and still serves the next."""
    for index, broken in enumerate(ODD):
        opened(push, broken, uri=f"{URI}.odd{index}.py")
        opened(push, BUGGY, uri=f"{URI}.after{index}.py")
        assert [d.code for d in await published(push, f"{URI}.after{index}.py")] == ["GG001"], repr(broken)


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


async def test_notebook_cells_with_ipython_lines_and_related_locations_in_other_cells(
        notebook_client: LanguageClient):
    """Magics, shell commands and help lines are not Python, the rest of their cells is; the
    places a finding names are in the cells they are in, and its message names those cells."""
    nb = "file:///tmp/gradguard-lsp-test/magic.ipynb"
    cells = ["%matplotlib inline\nimport torch\nx = torch.randn(4, requires_grad=True)\n",
             "%%capture\ny = torch.sigmoid(x)\n",
             "y?\nfiles = !ls\ny.relu_()\n",
             "t = %timeit -o y.sum()\ny.sum().backward()\n"]
    uris = [f"vscode-notebook-cell:/tmp/gradguard-lsp-test/magic.ipynb#C{i}" for i in range(4)]
    notebook_client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=nb, notebook_type="jupyter-notebook", version=1, cells=[
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=u) for u in uris]),
        cell_text_documents=[types.TextDocumentItem(uri=u, language_id="python", version=1, text=t)
                             for u, t in zip(uris, cells)]))
    [diag] = await published(notebook_client, uris[3])
    assert (diag.code, diag.range.start.line, diag.range.start.character) == ("GG002", 1, 0)
    assert "(line 2 of cell 2)" in diag.message and "(line 3 of cell 3)" in diag.message
    assert [(r.location.uri, r.location.range.start.line, r.location.range.start.character)
            for r in diag.related_information] == [(uris[2], 2, 0), (uris[1], 1, 4)]
    hover = await notebook_client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uris[3]), position=types.Position(line=1, character=3)))
    assert "- line 3 of cell 3: modified in place here" in hover.contents.value


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
    """Every corpus case, test program and project's main file (whose imports are followed),
    opened in the server, gets the diagnostics the command line prints for the same file:
    same codes, ranges and messages."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from corpus_support import CORPUS, manifest
    from pygls.uris import from_fs_path

    programs = sorted((Path(__file__).parent / "programs" / "cases").glob("*.py"))
    projects = sorted((Path(__file__).parent / "projects" / "cases").glob("*/*/train.py"))
    files = [CORPUS / c["file"] for c in manifest()] + programs + projects
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


async def test_fix_all_leaves_a_program_without_findings(pull: LanguageClient):
    """Every finding has a safe fix here: the one source action's edit leaves nothing to report."""
    text = ("import torch\n"
            "w = torch.randn(3, requires_grad=True)\n"
            "for step in range(3):\n"
            "    loss = (w * torch.randn(3)).sum()\n"
            "    loss.backward()\n"
            "    w -= 0.1 * w.grad\n"
            "    w.grad = None\n")
    opened(pull, text)
    params = types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=URI))
    assert (await pull.text_document_diagnostic_async(params)).items
    [action] = await pull.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll"])))  # the parent kind asks too
    assert action.kind == "source.fixAll.gradguard"
    changed(pull, apply_edits(text, workspace_edits(action.edit, URI)), 2)
    assert list((await pull.text_document_diagnostic_async(params)).items) == []


async def test_quick_fix_titles_start_with_the_rule_code(push: LanguageClient):
    opened(push, BUGGY)
    [diag] = await published(push)
    actions = await actions_for(push, diag)
    assert actions and all(a.title.startswith("GG001: ") for a in actions), [a.title for a in actions]
    assert "retain_graph=True" in next(a.title for a in actions if a.is_preferred)


async def test_a_form_feed_shifts_no_position(push: LanguageClient):
    """A form feed (a line break to str.splitlines, not to LSP or Python) in a comment before
    the bug: the squiggle, an incremental change and the noqa action all land on LSP's lines."""
    text = ("import torch\n"
            "# part one\f part two\n"
            "x = torch.randn(3, requires_grad=True)\n"
            "loss = (x.exp() * 2).sum()\n"
            "loss.backward()\n"
            "y = 1\n"
            "loss.backward()  # raises\n")
    opened(push, text)
    [diag] = await published(push)
    assert (diag.range.start, diag.range.end) == (types.Position(line=6, character=0),
                                                  types.Position(line=6, character=15))
    actions = await actions_for(push, diag)
    [noqa] = [a for a in actions if "noqa" in a.title]
    suppressed = apply_edits(text, workspace_edits(noqa.edit, URI))
    assert suppressed.split("\n")[6] == "loss.backward()  # raises  # noqa: GG001"
    push.text_document_did_change(types.DidChangeTextDocumentParams(  # as VS Code sends it: a range of line 6
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=6, character=0), end=types.Position(line=6, character=15)),
            text="pass")]))
    assert await published(push) == []  # the second backward is gone: the server's text is the editor's


@pytest_lsp.fixture(config=SERVER)
async def bare(lsp_client: LanguageClient):
    """A client the test initializes itself (workspace folders of its own)."""
    yield
    await lsp_client.shutdown_session()


def _folder(path) -> types.WorkspaceFolder:
    from pygls.uris import from_fs_path

    return types.WorkspaceFolder(uri=from_fs_path(str(path)), name=path.name)


async def test_workspace_diagnostics_cover_the_files_that_are_not_open(bare: LanguageClient, tmp_path):
    """workspace/diagnostic with diagnosticMode "workspace" (a window setting): a crashing file
    nobody opened is reported, an open one from the editor's text, an excluded one not; a file
    that did not change is not analysed again (its result id stays): it is reported unchanged."""
    from pygls.uris import from_fs_path

    (tmp_path / "pyproject.toml").write_text('[tool.gradguard]\nexclude = ["generated"]\n')
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "old.py").write_text(BUGGY)
    (tmp_path / "edited.py").write_text(CLEAN)
    train, edited = from_fs_path(str(tmp_path / "train.py")), from_fs_path(str(tmp_path / "edited.py"))
    bare.set_configuration({"diagnosticMode": "workspace"}, section="gradguard")
    result = await bare.initialize_session(types.InitializeParams(
        capabilities=pulling_capabilities(), workspace_folders=[_folder(tmp_path)]))
    assert result.capabilities.diagnostic_provider.workspace_diagnostics
    # vscode-languageclient registers each server command as an editor command: a name the
    # extension's manifest also contributes would make the extension fail to start
    manifest = json.loads((Path(__file__).resolve().parents[1] / "package.json").read_text())
    contributed = {c["command"] for c in manifest["contributes"]["commands"]}
    assert not contributed & set(result.capabilities.execute_command_provider.commands)
    opened(bare, BUGGY, uri=edited)  # the editor's text crashes, the file on disk does not

    report = await bare.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[]))
    items = {item.uri: item for item in report.items}
    assert set(items) == {train, edited}
    assert [d.code for d in items[train].items] == ["GG001"] and items[train].version is None
    assert [d.code for d in items[edited].items] == ["GG001"] and items[edited].version == 1

    again = await bare.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[
        types.PreviousResultId(uri=uri, value=item.result_id) for uri, item in items.items()]))
    assert {item.kind for item in again.items} == {"unchanged"}

    (tmp_path / "train.py").write_text(CLEAN + "\n")  # fixed on disk
    report = await bare.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[
        types.PreviousResultId(uri=uri, value=item.result_id) for uri, item in items.items()]))
    fresh = {item.uri: item for item in report.items}
    assert fresh[train].kind == "full" and list(fresh[train].items) == []

    bare.set_configuration({"diagnosticMode": "openFilesOnly"}, section="gradguard")
    bare.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    report = await bare.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[
        types.PreviousResultId(uri=item.uri, value=item.result_id) for item in fresh.values()]))
    assert [(item.uri, item.kind, list(item.items)) for item in report.items] == [(train, "full", [])], \
        "back to openFilesOnly: what the client holds of the files not open is cleared"


async def test_workspace_diagnostics_are_opt_in(bare: LanguageClient, tmp_path):
    """diagnosticMode "openFilesOnly" (the default): a pull walks and analyses nothing (VS Code pulls
    every two seconds); "check workspace" still checks every file, and the pulls that follow
    answer with what it found until the file is opened; a closed document is reported empty."""
    from pygls.uris import from_fs_path

    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")  # cannot be decoded: analysing it logs why
    (tmp_path / "edited.py").write_text(CLEAN)
    train, edited = from_fs_path(str(tmp_path / "train.py")), from_fs_path(str(tmp_path / "edited.py"))
    await bare.initialize_session(types.InitializeParams(
        capabilities=pulling_capabilities(), workspace_folders=[_folder(tmp_path)]))

    def pull_ws(*held):
        return bare.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[
            types.PreviousResultId(uri=item.uri, value=item.result_id) for item in held]))
    assert list((await pull_ws()).items) == []
    await asyncio.sleep(0.3)
    assert not any("latin.py" in m.message for m in bare.log_messages), "nothing was analysed"

    summary = await bare.workspace_execute_command_async(types.ExecuteCommandParams(
        command="gradguard.runWorkspaceCheck"))
    assert summary == {"files": 3, "findings": 1, "errors": 1}
    assert any("latin.py" in m.message for m in bare.log_messages)
    assert bare.diagnostic_refresh_count == 1
    items = {item.uri: item for item in (await pull_ws()).items}
    assert [d.code for d in items[train].items] == ["GG001"] and list(items[edited].items) == []
    assert {item.kind for item in (await pull_ws(*items.values())).items} == {"unchanged"}

    opened(bare, BUGGY, uri=edited)  # the document pull reports it now
    assert edited not in {item.uri for item in (await pull_ws(*items.values())).items}
    bare.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=edited)))
    cleared = {item.uri: item for item in (await pull_ws(*items.values())).items}
    assert cleared[edited].kind == "full" and list(cleared[edited].items) == []
    assert cleared[train].kind == "unchanged"


async def test_check_workspace_publishes_the_files_that_are_not_open(bare: LanguageClient, tmp_path):
    """A client that does not pull workspace diagnostics gets them pushed by the command."""
    from pygls.uris import from_fs_path

    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "broken.py").write_text("def f(:\n")
    await bare.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("neovim@v0.7.0"), workspace_folders=[_folder(tmp_path)]))
    summary = await bare.workspace_execute_command_async(types.ExecuteCommandParams(
        command="gradguard.runWorkspaceCheck"))
    assert summary == {"files": 3, "findings": 1, "errors": 1}
    assert [d.code for d in bare.diagnostics[from_fs_path(str(tmp_path / "train.py"))]] == ["GG001"]
    assert list(bare.diagnostics[from_fs_path(str(tmp_path / "clean.py"))]) == []


async def test_settings_per_workspace_folder(bare: LanguageClient, tmp_path):
    """Two folders, two settings: workspace/configuration is asked with each document's URI."""
    from pygls.uris import from_fs_path

    source = BUGGY + "w = torch.zeros(2, requires_grad=True)\nw += 1\n"  # GG001 and GG003
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "train.py").write_text(source)
    bare.set_configuration({"ignore": ["GG001"]}, section="gradguard", scope_uri=from_fs_path(str(a)))
    bare.set_configuration({"ignore": ["GG003"]}, section="gradguard", scope_uri=from_fs_path(str(b)))
    await bare.initialize_session(types.InitializeParams(
        capabilities=pulling_capabilities(), workspace_folders=[_folder(a), _folder(b)],
        initialization_options={"gradguard": {"select": ["GG1"]}}))  # not used: the client answers

    async def codes(folder) -> list[str]:
        uri = from_fs_path(str(folder / "train.py"))
        report = await bare.text_document_diagnostic_async(types.DocumentDiagnosticParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        return [d.code for d in report.items]
    for folder in (a, b):
        opened(bare, source, uri=from_fs_path(str(folder / "train.py")))
    assert await codes(a) == ["GG003"]
    assert await codes(b) == ["GG001"]

    bare.set_configuration({}, section="gradguard", scope_uri=from_fs_path(str(a)))
    bare.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    assert await codes(a) == ["GG001", "GG003"]  # asked again after the change
    assert await codes(b) == ["GG001"]


async def test_a_uri_with_an_escape_is_served(pull: LanguageClient):
    """`file:///my%20project/...` as VS Code sends it: pulled diagnostics, code actions, hover."""
    uri = "file:///tmp/gradguard%20lsp%20test/train.py"
    opened(pull, BUGGY, uri=uri)
    report = await pull.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    [diag] = report.items
    assert diag.code == "GG001"
    actions = await pull.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag])))
    assert any(a.is_preferred for a in actions)


async def test_closing_a_document_wakes_a_request_waiting_for_its_analysis():
    """A pull (or hover, or the workspace walk) waiting for an analysis that a close cancels
    answers at once instead of never."""
    from gradguard.lsp.documents import Analyses

    analyses = Analyses(debounce=30)  # the close comes while the analysis waits to start
    analyses.schedule(URI, 1, BUGGY, None, lambda *_: None)
    waiting = asyncio.ensure_future(analyses.settled(URI))
    await asyncio.sleep(0.05)
    analyses.close(URI)
    assert await asyncio.wait_for(waiting, 5) is None
