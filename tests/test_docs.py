"""The README's rule table and docs/rules.md are rendered from the rule registry."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_rule_docs_are_up_to_date():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "render_rule_docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _options(parser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings if s.startswith("--") and s != "--help"}


def test_the_readme_documents_every_option_and_setting():
    """`gradguard <command> --help` and the README name the same options; every
    `[tool.gradguard]` key has a row in the README's configuration table."""
    sys.path.insert(0, str(ROOT / "server"))
    from gradguard.cli import build_parser
    from gradguard.config import KEYS

    readme = (ROOT / "README.md").read_text()
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    missing = {f"{name} {option}" for name, sub in commands.items() for option in _options(sub)
               if f"`{option}" not in readme}
    assert not missing, f"options missing from README.md: {sorted(missing)}"
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert not [key for key in KEYS if f"`{key}`" not in table], "settings missing from the configuration table"
