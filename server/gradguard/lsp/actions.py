"""Code actions: the fixes a diagnostic carries, made into edits only when asked.

`textDocument/codeAction` lists one quick fix per `Fix` the finding carries (the one the
data flow calls right is `isPreferred`) plus a `# noqa` suppression; the libcst edit of a
fix is built in `codeAction/resolve`, on the smallest enclosing statement, because most
listed actions are never applied.  A client that cannot resolve edits gets them at once.
"""
from __future__ import annotations

from lsprotocol import types
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import ServerTextPosition

from gradguard.lsp.convert import fix_from_json, to_range
from gradguard.suppress import noqa_edit


def code_actions(doc: TextDocument, params: types.CodeActionParams, resolvable: bool) -> list[types.CodeAction]:
    only = params.context.only
    if only and not any(k == types.CodeActionKind.QuickFix or types.CodeActionKind.QuickFix.startswith(k)
                        for k in only):
        return []
    out = []
    for diag in params.context.diagnostics:
        if diag.source != "gradguard" or not isinstance(diag.data, dict):
            continue
        for fix in diag.data.get("fixes", []):
            action = types.CodeAction(
                title=fix["title"], kind=types.CodeActionKind.QuickFix, diagnostics=[diag],
                is_preferred=bool(fix.get("preferred")),
                data={"uri": doc.uri, "version": diag.data.get("version"), "fix": fix})
            out.append(action if resolvable else resolve(doc, action))
        noqa = suppress_action(doc, diag)
        if noqa is not None:
            out.append(noqa)
    return out


def resolve(doc: TextDocument, action: types.CodeAction) -> types.CodeAction:
    """Fill in the action's edit: libcst replacements mapped to the client's units.  A fix
    computed for a version the editor no longer has gets no edit (it could land anywhere)."""
    data = action.data if isinstance(action.data, dict) else {}
    if "fix" not in data or (data.get("version") is not None and data["version"] != doc.version):
        return action
    from gradguard import edits  # libcst loads on the first resolve, not at start-up

    source = doc.source
    reps = edits.replacements(source, fix_from_json(data["fix"]))
    if not reps:
        return action
    lines = source.splitlines(keepends=True) or [""]
    text_edits = [types.TextEdit(range=to_range(doc.position_codec, lines, r.span), new_text=r.text) for r in reps]
    action.edit = workspace_edit(doc, text_edits)
    return action


def suppress_action(doc: TextDocument, diag: types.Diagnostic) -> types.CodeAction | None:
    """`# noqa: CODE` on the flagged line, added to an existing noqa comment if there is one."""
    line_no = diag.range.start.line
    lines = doc.lines
    if line_no >= len(lines):
        return None
    old = lines[line_no].rstrip("\r\n")
    new = noqa_edit(old, str(diag.code))
    if new == old:
        return None
    end = doc.position_codec.position_to_client_units(lines, ServerTextPosition(line_no, len(old)))
    edit = types.TextEdit(range=types.Range(start=types.Position(line=line_no, character=0), end=end), new_text=new)
    return types.CodeAction(title=f"Suppress {diag.code} on this line (# noqa)", kind=types.CodeActionKind.QuickFix,
                            diagnostics=[diag], edit=workspace_edit(doc, [edit]))


def workspace_edit(doc: TextDocument, text_edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
        edits=text_edits)])
