"""Acceptance: the preferred quick fix, taken through the real server, makes each failing
corpus script run.

For every positive case of ../shared/corpus: open it in `gradguard lsp`, take the
diagnostic on the line that raised, ask for code actions, resolve the one marked
preferred, apply its edit as an editor would, and check that the result parses and that
every line outside the edit is unchanged.  Then run all fixed scripts under torch with
the execution oracle: the predicted error must be gone, and at least 90% must run clean.
"""
from __future__ import annotations

import ast
import asyncio
import difflib
import importlib.util

import pytest
import pytest_lsp
from corpus_support import CORPUS, manifest, run_oracle
from lsp_support import SERVER, apply_edits, workspace_edits
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities


def positives():
    return [c for c in manifest() if c["kind"] != "clean"]


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=client_capabilities("neovim@v0.7.0")))
    yield
    await lsp_client.shutdown_session()


async def preferred_fix(client: LanguageClient, case: dict) -> tuple[str, str, str, set]:
    """(fixed text, action title, problem, lines the fix's edits target) for one case."""
    text = (CORPUS / case["file"]).read_text(encoding="utf-8")
    uri = f"file:///tmp/gradguard-fixes/{case['id']}.py"
    client.diagnostics.pop(uri, None)
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))

    async def diagnostics():
        while uri not in client.diagnostics:
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        return client.diagnostics[uri]
    diags = [d for d in await asyncio.wait_for(diagnostics(), 30) if d.range.start.line == case["line"] - 1]
    if not diags:
        return text, "", "no diagnostic on the raising line", set()
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diags[0].range,
        context=types.CodeActionContext(diagnostics=diags[:1])))
    preferred = [a for a in actions if a.is_preferred]
    if not preferred:
        return text, "", "no preferred fix", set()
    action = preferred[0] if preferred[0].edit else await client.code_action_resolve_async(preferred[0])
    if action.edit is None:
        return text, action.title, "the fix resolved to no edit", set()
    targeted = set()
    for edit in action.data["fix"]["edits"] if isinstance(action.data, dict) else []:
        targeted.update(range(edit["span"][0], edit["span"][2] + 1))
    return apply_edits(text, workspace_edits(action.edit, uri)), action.title, "", targeted


def changed_outside(before: str, after: str, fix_lines: set[int]) -> list[int]:
    """Original line numbers changed by the edit that lie outside the lines the fix targets."""
    out = []
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    for tag, a0, a1, _, _ in matcher.get_opcodes():
        if tag != "equal":
            out.extend(n for n in range(a0 + 1, a1 + 1) if n not in fix_lines)
    return out


async def test_preferred_fixes_make_the_corpus_run(client: LanguageClient, tmp_path):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("running the fixed scripts needs torch")
    cases = positives()
    (tmp_path / "cases").mkdir()
    unfixed, broken = {}, {}
    for case in cases:
        fixed, title, problem, _ = await preferred_fix(client, case)
        if problem:
            unfixed[case["id"]] = problem  # it does not run clean
            continue
        try:
            ast.parse(fixed)
        except SyntaxError as exc:
            broken[case["id"]] = f"{title}: does not parse: {exc}"
            continue
        (tmp_path / "cases" / f"{case['id']}.py").write_text(fixed, encoding="utf-8")
        case["title"] = title
    assert not broken, broken  # every fix offered must parse
    names = sorted(p.name for p in (tmp_path / "cases").glob("*.py"))
    results = run_oracle(tmp_path, names)
    outcome = {c["id"]: results.get(f"{c['id']}.py", {"kind": "no fix", "message": unfixed.get(c["id"], "")})
               for c in cases}
    still = {k: v["kind"] for k, v in outcome.items() if v["kind"] == next(c["kind"] for c in cases if c["id"] == k)}
    clean = [k for k, v in outcome.items() if v["kind"] == "clean"]
    report = "\n".join(f"{c['id']}: {c.get('title')} -> {outcome[c['id']]['kind']} {outcome[c['id']]['message'][:90]}"
                       for c in cases)
    assert not still, f"the predicted error remains:\n{report}"
    assert len(clean) == len(cases), f"{len(clean)}/{len(cases)} run clean:\n{report}"


async def test_fixes_change_only_what_they_must(client: LanguageClient):
    """Every preferred fix changes only the statements it targets: every other original line
    is still there, byte for byte (new lines may be inserted: `import torch`, a detach)."""
    for case in positives():
        before = (CORPUS / case["file"]).read_text(encoding="utf-8")
        after, title, problem, targeted = await preferred_fix(client, case)
        if problem:
            continue  # reported by the test above
        assert changed_outside(before, after, targeted) == [], (case["id"], title)


TWO_FIXES = """\
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(2):
    y = net(torch.randn(2, 4))
    y += 1
    loss = y.sum()
    loss.backward()
    total = loss
    total.backward()
"""


@pytest.mark.parametrize("unsafe, applied, fixed", [
    (False, 1, ["    y = y + 1\n"]),
    (True, 2, ["    y = y + 1\n", "    loss.backward(retain_graph=True)\n"]),
])
async def test_fix_all_command_applies_the_fixes_through_the_editor(client: LanguageClient, unsafe, applied, fixed):
    """`gradguard.applyFixAll` (an editor's "fix all in this file") sends the fixes back as a
    workspace/applyEdit, safe ones only unless asked, and says how many it made."""
    uri = f"file:///tmp/gradguard-fixall/two_fixes_{unsafe}.py"
    received = []

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        received.append(params.edit)
        return types.ApplyWorkspaceEditResult(applied=True)

    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=3, text=TWO_FIXES)))
    while uri not in client.diagnostics:
        await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
    stale = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="gradguard.applyFixAll", arguments=[{"uri": uri, "version": 2}]))
    assert stale == {"applied": 0, "reason": "the document changed since the command was given"} and not received
    answer = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="gradguard.applyFixAll", arguments=[{"uri": uri, "version": 3, "unsafe": unsafe}]))
    assert answer == {"applied": applied}
    [edit] = received
    text = apply_edits(TWO_FIXES, workspace_edits(edit, uri))
    changed = [line for line in text.splitlines(keepends=True) if line not in TWO_FIXES.splitlines(keepends=True)]
    assert changed == fixed

