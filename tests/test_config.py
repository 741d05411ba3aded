"""`[tool.gradguard]` settings: where they are found, what they mean, and one-line errors."""
from pathlib import Path

import pytest
from gradguard.config import Config, ConfigError, load_config, load_config_file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_pyproject(tmp_path):
    config = load_config(tmp_path)
    assert config == Config()
    assert config.selects("GG001") and config.selects("GG101")
    assert config.timeout == 5.0 and config.enabled


def test_reads_all_keys(tmp_path):
    write(tmp_path / "pyproject.toml", """
[tool.gradguard]
select = ["gg0"]
ignore = ["GG002"]
severity = { GG001 = "warning" }
enabled = true
timeout = 2
exclude = ["generated"]
follow-imports = false
""")
    config = load_config(tmp_path)
    assert config.select == {"GG0"} and config.ignore == {"GG002"}
    assert config.severity == {"GG001": "warning"}
    assert config.timeout == 2.0 and config.exclude == ("generated",) and not config.follow_imports
    assert config.source == (tmp_path / "pyproject.toml").resolve()


def test_nearest_pyproject_with_the_table_wins(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.gradguard]\nignore = ["GG101"]\n')
    write(tmp_path / "sub" / "pyproject.toml", '[project]\nname = "sub"\n')  # no table: passed over
    source = write(tmp_path / "sub" / "pkg" / "m.py", "")
    assert load_config(source).ignore == {"GG101"}
    write(tmp_path / "sub" / "pyproject.toml", '[tool.gradguard]\ntimeout = 1\n')
    assert load_config(source).ignore == frozenset() and load_config(source).timeout == 1.0


def test_selection_most_specific_entry_wins():
    config = Config(select=frozenset({"GG001"}), ignore=frozenset({"GG0"}))
    assert config.selects("GG001") and not config.selects("GG002")
    config = Config(select=frozenset({"ALL"}), ignore=frozenset({"GG1"}))
    assert config.selects("GG004") and not config.selects("GG101")
    assert not Config(select=frozenset({"GG1"})).selects("GG001")
    assert not Config(select=frozenset({"GG001"}), ignore=frozenset({"GG001"})).selects("GG001")


def test_merged_editor_settings():
    base = Config(severity={"GG001": "warning"}, timeout=3.0)
    merged = base.merged({"severity": {"GG002": "hint"}, "ignore": ["GG101"], "timeout": None})
    assert merged.severity == {"GG001": "warning", "GG002": "hint"}
    assert merged.ignore == {"GG101"} and merged.timeout == 3.0
    assert base.severity == {"GG001": "warning"}  # the original is untouched


def test_editor_settings_names_reach_the_configuration():
    from gradguard.lsp.settings import parse

    settings = parse({"gradguard": {"followImports": False, "enable": True}})
    assert settings == {"follow-imports": False, "enabled": True}
    assert not Config().merged(settings).follow_imports


def test_diagnostic_mode_is_the_servers_own_setting():
    """`diagnosticMode` is no `[tool.gradguard]` key: it never reaches the configuration, and a
    bad value is one line in the log and the default."""
    from gradguard.lsp.settings import mode, parse

    logged: list[str] = []
    assert parse({"gradguard": {"diagnosticMode": "workspace", "select": ["GG0"]}}) == {"select": ["GG0"]}
    assert mode({"gradguard": {"diagnosticMode": "workspace"}}, logged.append) == "workspace"
    assert mode({"diagnosticMode": "workspace"}, logged.append) == "workspace"  # flat, as Neovim may send it
    assert mode({"gradguard": {"diagnosticMode": None}}, logged.append) == "openFilesOnly"
    assert mode(None, logged.append) == "openFilesOnly" and logged == []
    assert mode({"gradguard": {"diagnosticMode": "everything"}}, logged.append) == "openFilesOnly"
    [line] = logged
    assert "diagnosticMode" in line and "'everything'" in line and "\n" not in line


@pytest.mark.parametrize("table, key", [
    ('selet = ["GG001"]', "selet"),
    ('select = "GG001"', "select"),
    ('select = ["XX1"]', "select"),
    ('ignore = [1]', "ignore"),
    ('severity = { GG001 = "fatal" }', "GG001"),
    ('severity = { GG999 = "error" }', "severity"),
    ('enabled = "yes"', "enabled"),
    ('timeout = 0', "timeout"),
    ('timeout = true', "timeout"),
    ('exclude = "build"', "exclude"),
    ('follow-imports = 1', "follow-imports"),
])
def test_bad_values_name_the_key_in_one_line(tmp_path, table, key):
    write(tmp_path / "pyproject.toml", f"[tool.gradguard]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    message = str(caught.value)
    assert key in message and "pyproject.toml" in message and "\n" not in message


def test_invalid_toml_is_one_line(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.gradguard\nselect = \n")
    with pytest.raises(ConfigError, match="invalid TOML") as caught:
        load_config(tmp_path)
    assert "\n" not in str(caught.value)


def test_tool_gradguard_must_be_a_table(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool]\ngradguard = 3\n')
    with pytest.raises(ConfigError, match="must be a table"):
        load_config(tmp_path)


def test_explicit_config_file(tmp_path):
    path = write(tmp_path / "elsewhere.toml", '[tool.gradguard]\nenabled = false\n')
    assert load_config_file(path).enabled is False
    assert load_config_file(write(tmp_path / "plain.toml", "")) == Config(source=(tmp_path / "plain.toml").resolve())
    with pytest.raises(ConfigError, match="no such file"):
        load_config_file(tmp_path / "missing.toml")


def test_adoption_keys_and_their_defaults(tmp_path):
    write(tmp_path / "pyproject.toml", """
[tool.gradguard]
respect-gitignore = false
force-exclude = true
per-file-ignores = { "tests/**" = ["gg1"], "scripts/*.py" = ["ALL"] }
""")
    config = load_config(tmp_path)
    assert not config.respect_gitignore and config.force_exclude
    assert dict(config.per_file_ignores) == {"tests/**": {"GG1"}, "scripts/*.py": {"ALL"}}
    assert Config().respect_gitignore and not Config().force_exclude and Config().per_file_ignores == ()
    test_file = str(tmp_path / "tests" / "unit" / "test_x.py")
    assert not config.selects("GG101", test_file) and config.selects("GG001", test_file)
    assert not config.selects("GG001", str(tmp_path / "scripts" / "s.py"))
    assert config.selects("GG001", str(tmp_path / "scripts" / "deep" / "s.py"))  # `*` stops at `/`
    assert config.selects("GG101")  # no path: per-file-ignores do not apply


@pytest.mark.parametrize("table", ['respect-gitignore = "no"', "force-exclude = 1"])
def test_adoption_switches_are_booleans(tmp_path, table):
    write(tmp_path / "pyproject.toml", f"[tool.gradguard]\n{table}\n")
    with pytest.raises(ConfigError, match="must be true or false"):
        load_config(tmp_path)


def test_an_opt_in_rule_runs_only_when_select_names_it():
    assert not Config().selects("GG100") and not Config(select=frozenset({"GG1"})).selects("GG100")
    assert Config(select=frozenset({"ALL", "GG100"})).selects("GG100")
    assert not Config(select=frozenset({"GG100"}), ignore=frozenset({"GG100"})).selects("GG100")
