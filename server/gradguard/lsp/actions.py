"""Code actions: the fixes a diagnostic carries, made into edits only when asked.

`textDocument/codeAction` lists the fixes a finding carries that the engine confirms
(`verify`: applied and analysed again, the finding is gone and nothing new appears; the
first is `isPreferred`; an unsafe one says so in its title), then a `# noqa` suppression,
never preferred; each title starts with the rule's code, as ruff's do ("GG001: ...").  The
libcst edit of a fix is built again in `codeAction/resolve`, on the smallest enclosing
statement.  A client that cannot resolve edits gets them at once.
"""
from __future__ import annotations

import time

from lsprotocol import types
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import ServerTextPosition

from gradguard import verify
from gradguard.analysis import AnalysisTimeout, analyze
from gradguard.api import NOT_ANALYSED, workspace_for
from gradguard.config import Config
from gradguard.findings import Finding, Related, Span
from gradguard.lsp.convert import fix_from_json, fix_to_json, to_range
from gradguard.rules import rule_by_code
from gradguard.spans import split_lines
from gradguard.suppress import noqa_edit


FIX_ALL = "source.fixAll.gradguard"  # for `editor.codeActionsOnSave`, as ruff's `source.fixAll.ruff`
FIX_ALL_COMMAND = "gradguard.applyFixAll"  # workspace/executeCommand: an editor's "fix all in this file"


def _wanted(kind: str, only) -> bool:
    """Whether an action of `kind` answers a request limited to the kinds `only` (a prefix matches)."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def code_actions(doc: TextDocument, params: types.CodeActionParams, resolvable: bool, config=None,
                 workspace=None) -> list[types.CodeAction]:
    """`workspace`: where the server follows imports (with the open documents' texts)."""
    only = params.context.only
    out = []
    if config is not None and only and _wanted(FIX_ALL, only):  # asked for by name only, as on save
        fix_all = fix_all_action(doc, config, workspace)
        out += [fix_all] if fix_all is not None else []
    if not _wanted(types.CodeActionKind.QuickFix, only):
        return out
    confirmed = _Confirmed(doc, workspace_for(config or Config(), workspace), (config or Config()).timeout)
    for diag in params.context.diagnostics:
        if diag.source != "gradguard" or not isinstance(diag.data, dict) or diag.code == NOT_ANALYSED:
            continue  # another tool's, or GG000: no rule's, nothing to fix or silence
        for fix in confirmed.fixes(diag):
            title = f"{diag.code}: {fix['title']}" + ("" if fix.get("applicability") == "safe" else " (unsafe fix)")
            action = types.CodeAction(
                title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[diag],
                is_preferred=bool(fix.get("preferred")),
                data={"uri": doc.uri, "version": diag.data.get("version"), "fix": fix})
            out.append(action if resolvable else resolve(doc, action))
        noqa = suppress_action(doc, diag)
        if noqa is not None:
            out.append(noqa)
    return out


class _Confirmed:
    """The fixes of a diagnostic that `verify` confirms on the document as it is now.  A
    notebook cell is only part of what was analysed, a diagnostic of another version has
    moved, and without libcst no fix can be built: their fixes are listed as planned."""

    def __init__(self, doc: TextDocument, workspace, timeout: float):
        self.doc = doc
        self.workspace = workspace  # imports followed as when the document was checked
        self.timeout = timeout  # for the analysis of the document (the `timeout` setting)
        self.findings = None

    def fixes(self, diag: types.Diagnostic) -> list[dict]:
        planned = diag.data.get("fixes", [])
        if not planned or self.doc.uri.startswith("vscode-notebook-cell") or \
                diag.data.get("version") not in (None, self.doc.version):
            return planned
        rule = rule_by_code(str(diag.code))
        line = diag.range.start.line + 1
        related = tuple(Related(Span(r.location.range.start.line + 1, 0, r.location.range.start.line + 1, 0), "")
                        for r in diag.related_information or ())
        finding = Finding(str(diag.code), "", "", "", Span(line, 0, line, 0), related,
                          fixes=tuple(fix_from_json(f) for f in planned), predicts=rule.predicts if rule else None)
        path = self.doc.path or "<string>"
        try:
            if self.findings is None:
                self.findings = analyze(self.doc.source, path=path, workspace=self.workspace,
                                        deadline=time.monotonic() + self.timeout)
            return [fix_to_json(f) for f in verify.verified(self.doc.source, finding, self.findings, path=path,
                                                            workspace=self.workspace)]
        except (SyntaxError, AnalysisTimeout, ImportError):  # no libcst here: listed as planned
            return planned


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
    lines = split_lines(source) or [""]
    text_edits = [types.TextEdit(range=to_range(doc.position_codec, lines, r.span), new_text=r.text) for r in reps]
    action.edit = workspace_edit(doc, text_edits)
    return action


def fix_all_action(doc: TextDocument, config, workspace=None) -> types.CodeAction | None:
    """`source.fixAll.gradguard`: every safe fix, as `fix_all_edit` makes them."""
    made = fix_all_edit(doc, config, workspace=workspace)
    return None if made is None else types.CodeAction(title=f"GradGuard: fix all ({made[1]} safe)", kind=FIX_ALL,
                                                      edit=made[0])


def fix_all_edit(doc: TextDocument, config, unsafe: bool = False,
                 workspace=None) -> tuple[types.WorkspaceEdit, int] | None:
    """Every safe fix the engine confirms (unsafe ones too if `unsafe`), applied one at a time
    (`gradguard check --fix`), as one edit of the whole document, and how many fixes it makes;
    None when there is nothing to fix, or for a notebook cell (only part of what is analysed)."""
    if doc.uri.startswith("vscode-notebook-cell"):
        return None
    source = doc.source
    try:
        fixed, titles = verify.fix_all(source, doc.path or doc.uri, config, unsafe=unsafe, workspace=workspace)
    except ImportError:  # no libcst in this interpreter: the server already says how to install it
        return None
    if not titles:
        return None
    lines = split_lines(source) or [""]
    if source.endswith(("\n", "\r")):
        end = types.Position(line=len(lines), character=0)
    else:
        end = doc.position_codec.position_to_client_units(lines, ServerTextPosition(len(lines) - 1, len(lines[-1])))
    edit = types.TextEdit(range=types.Range(start=types.Position(line=0, character=0), end=end), new_text=fixed)
    return workspace_edit(doc, [edit]), len(titles)


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
    return types.CodeAction(title=f"{diag.code}: Suppress on this line (# noqa)", kind=types.CodeActionKind.QuickFix,
                            diagnostics=[diag], edit=workspace_edit(doc, [edit]))


def workspace_edit(doc: TextDocument, text_edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
        edits=text_edits)])
