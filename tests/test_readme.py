"""The README's Python example runs as written."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_api_examples_run(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 4, "the README lost an example"
    for code in blocks[:3]:  # the simulator API, placing a PyTorch model, the environment constructors
        exec(compile(code, "README.md", "exec"), {})
    assert "OpInterval" in capsys.readouterr().out


def test_readme_sb3_usage_runs():
    block = next(b for b in python_blocks() if "PlacementPolicy" in b)
    assert len(block.strip().splitlines()) == 3
    namespace: dict[str, object] = {}
    exec(compile(block.replace(".learn(2048)", ".learn(32)").replace("PPO(PlacementPolicy, ",
                 "PPO(PlacementPolicy, n_steps=32, batch_size=32, n_epochs=1, env="), "README.md", "exec"), namespace)
    assert namespace["model"].num_timesteps >= 32


def test_readme_worked_example_is_the_shipped_script_and_runs():
    script = README.parent / "examples" / "ppo_quickstart.py"
    assert script.read_text() in python_blocks()
    out = subprocess.run([sys.executable, str(script), "256"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = dict(line.rsplit(None, 2)[0:2] for line in out.stdout.strip().splitlines())
    assert float(lines["PPO, best seen"]) < float(lines["start (one GPU)"])


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    commands = re.findall(r"```bash\n(.*?)```", text, re.S)[:2]
    assert "pip install torch==2.13.0" in commands[0] and commands[0].strip().endswith("python train.py")
    assert "python -m pytest" in commands[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0" in ci and 'pip install -q -e ".[test]"' in ci and "python -m pytest" in ci
