"""Source bytes and text, the way Python reads and writes them: PEP 263 coding cookie, BOM,
else UTF-8.  Shared by whatever reads a user's file: the command line, the editor's files on
disk, and the workspace modules imports lead to."""
from __future__ import annotations

import io
import tokenize


def decode(data: bytes) -> str:
    """Source bytes as text, the way Python reads them: PEP 263 coding cookie, BOM, else UTF-8."""
    return data.decode(_encoding(data))


def encode(text: str, like: bytes) -> bytes:
    """`text` in the encoding the source bytes `like` are in (a file written back after an edit)."""
    return text.encode(_encoding(like))


def _encoding(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding
