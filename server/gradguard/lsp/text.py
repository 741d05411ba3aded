"""Open documents whose lines are LSP's lines.

pygls splits a document with `str.splitlines`, which also breaks at a form feed, `\\v`,
`\\x1c`-`\\x1e`, `\\x85`, `\\u2028`...; LSP ends lines at `\\n`, `\\r\\n` and `\\r` only (as Python's
tokenizer does).  With pygls's lines, a `\\f` in a comment would shift every position after it:
incremental changes landed on the wrong line, hovers read the wrong line, `# noqa` went on the
line above.  These documents split with `spans.split_lines`, as every other position here does.

pygls also keeps documents by unquoted URI, so `uri in workspace.text_documents` was false for
the URI the client sent when it has an escape (`file:///my%20project/train.py`): a pulling
client got no diagnostics for a file in a folder whose name has a space.  The workspace here
finds a document by either form.

A change whose range is not in the document (a line past its end, or an end before its start)
is rejected rather than guessed at: pygls applied it wherever its arithmetic fell (text dropped,
or duplicated), so the server went on analysing a text the editor does not have.  LSP has no
request to ask for the text again, so the document is marked out of sync (`out_of_sync`: why)
and its diagnostics say so (GG000, "reopen it"); incremental changes are ignored until a
change that sends the whole text, or reopening the document, brings it back.  A character past
the end of its line is the line's end, as the specification says.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import unquote

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace

from gradguard.spans import split_lines


class OutOfRange(ValueError):
    """A change's range that is not in the document; `str()` says where."""


def _ignore(uri: str, why: str) -> None:
    pass


class LspTextDocument(TextDocument):
    out_of_sync: str | None = None  # why the text may differ from the editor's (a change rejected)
    on_reject: Callable[[str, str], None] = staticmethod(_ignore)  # told (uri, why) when a change is rejected

    @property
    def lines(self) -> Sequence[str]:
        return split_lines(self.source)

    def snapshot(self) -> LspTextDocument:
        """A copy the editor's later changes leave as it is, for work done off the event loop."""
        return LspTextDocument(self.uri, self.source, self.version, self.language_id,
                               position_codec=self.position_codec)

    def apply_change(self, change: types.TextDocumentContentChangeEvent) -> None:
        if not isinstance(change, types.TextDocumentContentChangePartial):
            self.out_of_sync = None  # the whole text: in sync again
            super().apply_change(change)
            return
        if self.out_of_sync is not None:
            return  # applied to a text that is not the editor's, it would only add to the difference
        try:
            start, end = self._offset(change.range.start), self._offset(change.range.end)
            if end < start:
                raise OutOfRange(f"the range ends ({_at(change.range.end)}) before it starts "
                                 f"({_at(change.range.start)})")
        except OutOfRange as exc:
            self.out_of_sync = str(exc)
            self.on_reject(self.uri, self.out_of_sync)
            return
        self._source = self.source[:start] + change.text + self.source[end:]

    def _offset(self, position: types.Position) -> int:
        """The index in `source` of a position in the client's units; a character past the end
        of its line is the end of the line (before its line break)."""
        lines = self.lines
        if position.line > len(lines):
            raise OutOfRange(f"{_at(position)} is past the end of the document ({len(lines)} lines)")
        before = sum(map(len, lines[:position.line]))
        if position.line == len(lines):
            return before
        line = lines[position.line].rstrip("\r\n")
        units = self.position_codec.impl.code_units_for_char
        count = index = 0
        while index < len(line) and count < position.character:
            count += units(line[index])
            index += 1
        return before + index


def _at(position: types.Position) -> str:
    return f"line {position.line + 1}, character {position.character}"


class _Documents(dict):
    """Open documents by unquoted URI (as pygls stores them), found by the quoted one too."""

    def _key(self, uri):
        return uri if dict.__contains__(self, uri) or not isinstance(uri, str) else unquote(uri)

    def __contains__(self, uri) -> bool:
        return dict.__contains__(self, self._key(uri))

    def __getitem__(self, uri):
        return dict.__getitem__(self, self._key(uri))

    def get(self, uri, default=None):
        return dict.get(self, self._key(uri), default)


class LspWorkspace(Workspace):
    """pygls's workspace, keeping `LspTextDocument`s found by the URI the client sent."""

    def __init__(self, *args, on_reject: Callable[[str, str], None] = _ignore, **kwargs):
        super().__init__(*args, **kwargs)
        self._text_documents = _Documents()
        self.on_reject = on_reject  # (uri, why): a document's change was rejected

    @classmethod
    def like(cls, workspace: Workspace, sync_kind: types.TextDocumentSyncKind,
             on_reject: Callable[[str, str], None]) -> LspWorkspace:
        return cls(workspace.root_uri, sync_kind, list(workspace.folders.values()), workspace.position_encoding,
                   on_reject=on_reject)

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> TextDocument:
        doc = LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                              sync_kind=self._sync_kind, position_codec=self.position_codec)
        doc.on_reject = self.on_reject
        return doc
