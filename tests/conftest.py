"""How a test run is shared out: one process more than there are cores, longest files first.

The test command runs the files in parallel (`-n auto --dist loadfile`, pyproject.toml): each
file on one process, handed out in order.  Many tests wait more than they compute (an editor
driven through its UI, pip and npm installing), so one process more than the cores keeps them
busy.  A long file handed out last would run alone at the end; handed out first, the short
ones fill the other processes meanwhile.
"""
from __future__ import annotations

import os

# Files in the order they start, longest first (the rest follow in their usual order).
LONGEST = ("test_vscode.py", "test_explain.py", "test_verify.py", "test_lsp.py", "test_install.py",
           "test_ci_integrations.py", "test_same_findings.py", "test_differential.py")


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST)))  # stable: each file keeps its order


def pytest_xdist_auto_num_workers(config) -> int:
    return (os.cpu_count() or 1) + 1
