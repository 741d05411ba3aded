"""The language server: LSP over the analysis library (see server.py)."""
