"""The README's Python example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "OpInterval" in out


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    commands = re.findall(r"```bash\n(.*?)```", text, re.S)[:2]
    assert "pip install torch==2.13.0" in commands[0] and "python -m baselines --graph default" in commands[0]
    assert "python -m pytest" in commands[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0" in ci and 'pip install -q -e ".[test]"' in ci and "python -m pytest" in ci
