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
"""
from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace

from gradguard.spans import split_lines


class LspTextDocument(TextDocument):
    @property
    def lines(self) -> Sequence[str]:
        return split_lines(self.source)


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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._text_documents = _Documents()

    @classmethod
    def like(cls, workspace: Workspace, sync_kind: types.TextDocumentSyncKind) -> LspWorkspace:
        return cls(workspace.root_uri, sync_kind, list(workspace.folders.values()), workspace.position_encoding)

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> TextDocument:
        return LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                               sync_kind=self._sync_kind, position_codec=self.position_codec)
