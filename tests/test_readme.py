"""Every Python block of the README and of docs/ runs as written (a few made shorter), and the README opens with
the two commands that CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted(p for p in (ROOT / "docs").rglob("*.md") if "spec" not in p.parts)
QUICKSTART = ROOT / "examples" / "ppo_quickstart.py"
SHORTER = {  # the same code with fewer steps, so that the tests stay quick
    ".learn(2048)": ".learn(32)",
    ".learn(256, progress_bar=True)": ".learn(32)",
    ", n_steps=64,": ",",
    'PPO(PlacementPolicy, "placement_env:':
        'PPO(PlacementPolicy, n_steps=32, batch_size=32, n_epochs=1, env="placement_env:',
    "budget_seconds=30": "budget_seconds=5",
}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def every_block() -> list[tuple[str, int, str]]:
    return [(str(p.relative_to(ROOT)), i, code) for p in [README, *DOCS] for i, code in enumerate(python_blocks(p))]


@pytest.mark.parametrize("where, index, code", every_block(), ids=[f"{w}[{i}]" for w, i, _ in every_block()])
def test_block_runs(where, index, code, tmp_path, monkeypatch, capsys):
    if code == QUICKSTART.read_text():
        pytest.skip("the worked example runs as a script: test_worked_example_is_the_shipped_script_and_runs")
    for before, after in SHORTER.items():
        code = code.replace(before, after)
    monkeypatch.chdir(tmp_path)  # blocks that write (runs/...) write here
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(code, f"{where} block {index}", "exec"), namespace)
    if "r.schedule.ops()" in code:  # the API tour prints real schedule entries
        assert "OpInterval" in capsys.readouterr().out


def test_the_documentation_keeps_its_examples():
    blocks = every_block()
    assert sum(1 for where, _, _ in blocks if where == "README.md") >= 3
    assert {where for where, _, _ in blocks} >= {"README.md", "docs/graphs.md", "docs/environments.md",
                                                  "docs/training.md"}
    assert any("r.schedule.ops()" in code for where, _, code in blocks if where == "README.md")


def test_readme_sb3_usage_is_three_lines():
    block = next(b for b in python_blocks(README) if "PlacementPolicy" in b)
    assert len(block.strip().splitlines()) == 3


@pytest.mark.slow
def test_worked_example_is_the_shipped_script_and_runs():
    assert QUICKSTART.read_text() in python_blocks(ROOT / "docs" / "environments.md")
    out = subprocess.run([sys.executable, str(QUICKSTART), "256"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = dict(line.rsplit(None, 2)[0:2] for line in out.stdout.strip().splitlines())
    assert float(lines["PPO, best seen"]) < float(lines["start (one GPU)"])


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    commands = re.findall(r"```bash\n(.*?)```", text, re.S)[:2]
    assert "pip install torch==2.13.0" in commands[0] and commands[0].strip().endswith("python train.py")
    assert "python -m pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0" in ci and 'pip install -q -e ".[test]"' in ci and "python -m pytest" in ci
    assert ci.index("ruff check") < ci.index("mypy") < ci.index("python -m pytest")


def test_readme_is_a_front_page_whose_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) < 250
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert target.startswith("https://") or (ROOT / target).exists(), target
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), (doc.name, target)


def test_the_front_page_says_what_it_is_then_the_commands_then_where_it_stands():
    text = README.read_text()
    intro = text.split("```bash")[0]
    assert "FADP-GT: A Frequency-Adaptive and Dual-Pooling Graph Transformer Model for Device Placement" in intro
    assert "(https://doi.org/10.3390/electronics14214333)" in intro and "researchers and engineers" in intro
    standing = text.split("## Where it stands")[1].split("\n## ")[0]
    bullets = [line for line in standing.splitlines() if line.startswith("- ")]
    assert 3 <= len(bullets) <= 5 and "(RESULTS.md)" in standing
    assert not re.search(r"this project's (2-core )?machine|on this machine", text)


def test_the_changelog_is_by_release_and_its_newest_is_the_package_version():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+)", text, re.M)
    assert releases[0] == version and "Unreleased" not in releases
    sections = re.findall(r"^### (.+)$", text, re.M)
    assert set(sections) <= {"Added", "Changed", "Fixed", "Removed", "Deprecated", "Security"}, sections
    assert not re.search(r"\(issue \d+", text)
