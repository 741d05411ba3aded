"""The README's rule table and docs/rules.md are rendered from the rule registry."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_rule_docs_are_up_to_date():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "render_rule_docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
