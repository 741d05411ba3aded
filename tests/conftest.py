"""The order of a test run: the files that take longest first.

The test command runs the files on every core (`-n auto --dist loadfile`, pyproject.toml):
each file on one process, handed out in order.  A long file handed out last would run alone
at the end; handed out first, the short ones fill the other processes meanwhile.
"""
from __future__ import annotations

# Files in the order they start, longest first (the rest follow in their usual order).
LONGEST = ("test_vscode.py", "test_explain.py", "test_verify.py", "test_lsp.py", "test_install.py",
           "test_ci_integrations.py", "test_same_findings.py", "test_differential.py")


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST)))  # stable: each file keeps its order
