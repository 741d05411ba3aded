#!/usr/bin/env python3
"""Render every rule's documentation from the registry into docs/rules.md and the README's
rule table, so `gradguard rule CODE`, hover and the docs show one text.

    python scripts/render_rule_docs.py          # rewrite the files
    python scripts/render_rule_docs.py --check  # exit 1 if they are out of date (a test runs this)
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from gradguard.rules import ALL_RULES  # noqa: E402

START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def rules_md() -> str:
    parts = ["# GradGuard rules\n", "Generated from `server/gradguard/rules/` by `scripts/render_rule_docs.py`.\n"]
    for rule in ALL_RULES:
        doc = rule.doc().replace("\n## ", "\n### ")
        parts.append("\n" + doc.replace(f"# {rule.code}", f"## {rule.code}", 1))
    return "".join(parts)


def readme_table() -> str:
    rows = ["| code | name | predicts | severity | what it finds |", "| --- | --- | --- | --- | --- |"]
    for rule in ALL_RULES:
        anchor = f"{rule.code.lower()}-{rule.name}"
        predicts = f"`{rule.predicts}`" if rule.predicts else "advisory"
        rows.append(f"| [{rule.code}](docs/rules.md#{anchor}) | `{rule.name}` | {predicts} | {rule.severity} "
                    f"| {rule.summary} |")
    return "\n".join(rows)


def render_readme(text: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"README.md lacks the {START} / {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{readme_table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    targets = {ROOT / "docs" / "rules.md": rules_md(),
               ROOT / "README.md": render_readme((ROOT / "README.md").read_text(encoding="utf-8"))}
    stale = [p for p, text in targets.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is out of date: run scripts/render_rule_docs.py")
        return 1 if stale else 0
    for p in stale:
        p.write_text(targets[p], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
