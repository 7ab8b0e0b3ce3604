"""The command-line tools: ``python -m baselines``, ``python -m placement_env`` and ``train.py``."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from baselines import unit_demand
from baselines.__main__ import main as baselines_main
from placement_env import Cluster, Device, load_graph, read_placement, simulate, write_placement
from placement_env.__main__ import main as env_main
from placement_env.cli import run_cli

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_placer_comparison_command_prints_the_table_and_writes_json(tmp_path):
    out = run("-m", "baselines", "--graph", "default", "--devices", "3", "--json", str(tmp_path / "t.json"),
              "--placements-dir", str(tmp_path / "p"), "--budget-seconds", "0.3")
    assert out.returncode == 0, out.stderr
    for placer in ("single", "round-robin", "random", "m-topo", "m-etf", "heft", "metis", "critical-path", "split",
                   "local-search", "anneal"):
        assert placer in out.stdout
    assert "makespan (ms)" in out.stdout and "/ LB" in out.stdout and "OOM" in out.stdout
    table = json.loads((tmp_path / "t.json").read_text())
    heft = next(r for r in table["rows"] if r["placer"] == "heft")
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    assert heft["makespan"] == simulate(g, heft["placement"], c).makespan
    assert (tmp_path / "p" / "heft.json").exists()


def test_placer_comparison_writes_one_trace_per_placed_placer(tmp_path, capsys):
    """--traces-dir: DIR/<placer>.json is the simulate command's trace of that placer's placement;
    none for a placer that could not place."""
    g = load_graph("synthetic/1")
    argv = ["--graph", "synthetic/1", "--devices", "2", "--placers", "single,heft"]
    assert baselines_main(argv + ["--placements-dir", str(tmp_path / "p"), "--traces-dir", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    assert sorted(x.name for x in (tmp_path / "t").iterdir()) == ["heft.json", "single.json"]
    for placer in ("single", "heft"):
        given, trace = tmp_path / "p" / f"{placer}.json", tmp_path / f"{placer}.json"
        assert env_main(["simulate", "--graph", "synthetic/1", "--devices", "2", "--placement", str(given),
                         "--trace", str(trace), "--json"]) == 0
        assert (tmp_path / "t" / f"{placer}.json").read_text() == trace.read_text()
    heft = json.loads((tmp_path / "t" / "heft.json").read_text())
    assert heft["otherData"]["makespan_s"] == simulate(g, read_placement(tmp_path / "p" / "heft.json", g),
                                                         Cluster.preset("p100", 2)).makespan
    small = Cluster([Device(f"d{i}", 1.0, int(unit_demand(g).sum() * 0.6)) for i in range(2)],
                    np.full((2, 2), 1e10), np.full((2, 2), 1e-5))
    small.to_json(tmp_path / "small.json")
    assert baselines_main(["--graph", "synthetic/1", "--cluster", str(tmp_path / "small.json"),
                           "--placers", "single,heft", "--traces-dir", str(tmp_path / "t2")]) == 0
    assert "single         infeasible" in capsys.readouterr().out
    assert [x.name for x in (tmp_path / "t2").iterdir()] == ["heft.json"]


def test_simulate_command_json_output(tmp_path):
    g = load_graph("default")
    write_placement([i % 2 for i in g.unit_of], tmp_path / "p.json")
    out = run("-m", "placement_env", "simulate", "--graph", "default", "--placement", str(tmp_path / "p.json"),
              "--devices", "2", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"makespan", "lower_bound", "peak_memory", "busy", "oom"}
    r = simulate(g, [i % 2 for i in g.unit_of], Cluster.preset("p100", 2))
    assert data["makespan"] == r.makespan
    assert data["peak_memory"] == [int(x) for x in r.peak_memory]
    assert data["busy"] == list(r.busy) and data["oom"] is False


def test_simulate_command_writes_a_chrome_trace(tmp_path, capsys):
    g = load_graph("default")
    placement = [i % 2 for i in g.unit_of]
    write_placement(placement, tmp_path / "p.json")
    argv = ["simulate", "--placement", str(tmp_path / "p.json"), "--devices", "2", "--trace"]
    assert env_main(argv + [str(tmp_path / "step.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan"] > 0  # stdout stays one JSON object
    trace = json.loads((tmp_path / "step.json").read_text())
    r = simulate(g, placement, Cluster.preset("p100", 2))
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == g.num_nodes + 2 * r.schedule.num_transfers
    assert trace["otherData"]["makespan_s"] == r.makespan
    peaks = [max(e["args"]["bytes"] for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == d)
             for d in range(2)]
    assert peaks == list(r.peak_memory)
    assert env_main(argv + [str(tmp_path / "step.json.gz")]) == 0
    assert f"trace        {tmp_path / 'step.json.gz'}" in capsys.readouterr().out
    assert (tmp_path / "step.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert run_cli(lambda: env_main(argv + [str(tmp_path / "missing" / "step.json"), "--json"])) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error:") and "missing" in out.err and "No such file" in out.err


def test_simulate_command_text_output_and_cluster_file(tmp_path, capsys):
    g = load_graph("default")
    ids = g.ids
    (tmp_path / "p.json").write_text(json.dumps({nid: 0 for nid in ids}))
    Cluster.heterogeneous(["p100", "v100-nvlink"]).to_json(tmp_path / "c.json")
    assert env_main(["simulate", "--placement", str(tmp_path / "p.json"), "--cluster", str(tmp_path / "c.json")]) == 0
    text = capsys.readouterr().out
    assert "makespan" in text and "lower bound" in text and "OOM          no" in text and "gpu1" in text


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--graph", "missing.json", "--placement", "p.json"], "missing.json"),
    (["simulate", "--graph", "default", "--placement", "missing.json"], "missing.json"),
    (["simulate", "--graph", "default", "--placement", "{p}", "--devices", "0"], "integer >= 1"),
    (["simulate", "--graph", "synthetic/1", "--placement", "{p}", "--param-factor", "nan"],
     "param_factor must be a finite number >= 0, got nan"),
])
def test_simulate_command_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "p.json").write_text("[0]")
    argv = [a.replace("{p}", str(tmp_path / "p.json")) for a in argv]
    assert run_cli(lambda: env_main(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_write_placement_round_trips_through_read_placement(tmp_path):
    g = load_graph("default")
    placement = np.array([i % 3 for i in g.unit_of])  # a numpy array, as the placers return
    write_placement(placement, tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text()) == placement.tolist()
    assert read_placement(tmp_path / "p.json", g).tolist() == placement.tolist()
    write_placement([np.int32(1), 2.0, np.float32(0)], tmp_path / "q.json")  # type: ignore[list-item]
    assert json.loads((tmp_path / "q.json").read_text()) == [1, 2, 0]


@pytest.mark.parametrize("placement, message", [
    ("p.json", "got str 'p.json' (the arguments are placement, then path)"),
    (3, "got int 3"),
    (np.zeros((2, 2), np.int64), "got shape (2, 2)"),
    ([0, 1.5], "entry 1 must be a non-negative integer device index, got 1.5"),
    ([0, -1], "entry 1 must be a non-negative integer device index, got -1"),
    ([0, float("nan")], "got nan"),
    ([True, 0], "entry 0 must be a non-negative integer device index, got True"),
    ([0, [1]], "entry 1 must be a non-negative integer device index, got [1]"),
])
def test_write_placement_refuses_what_is_not_a_device_list(tmp_path, placement, message):
    with pytest.raises(ValueError) as err:
        write_placement(placement, tmp_path / "p.json")
    assert message in str(err.value)
    assert not (tmp_path / "p.json").exists()


def test_placement_file_errors_name_the_node(tmp_path, capsys):
    first = load_graph("default").nodes[0].id
    (tmp_path / "p.json").write_text(json.dumps({first: 0}))
    assert run_cli(lambda: env_main(["simulate", "--placement", str(tmp_path / "p.json")])) == 2
    assert "no device given for node" in capsys.readouterr().err
    (tmp_path / "p.json").write_text(json.dumps({first: 0, "no-such-op": 1}))
    assert run_cli(lambda: env_main(["simulate", "--placement", str(tmp_path / "p.json")])) == 2
    assert "node 'no-such-op' is not in graph 'cifar10/0'" in capsys.readouterr().err
    (tmp_path / "p.json").write_text(f'{{"{first}": 0, "{first}": 1}}')  # json alone would keep device 1
    assert run_cli(lambda: env_main(["simulate", "--placement", str(tmp_path / "p.json")])) == 2
    assert f"p.json: key '{first}' appears twice in one object" in capsys.readouterr().err


@pytest.mark.parametrize("flag, path, message", [
    ("--json", "{tmp}", "'{tmp}' is a folder; give a file name to write"),
    ("--json", "{tmp}/no/out.json", "cannot write '{tmp}/no/out.json': folder '{tmp}/no' does not exist"),
    ("--placements-dir", "{tmp}/file", "'{tmp}/file' is a file, not a folder"),
    ("--traces-dir", "{tmp}/file", "'{tmp}/file' is a file, not a folder"),
])
def test_an_output_that_cannot_be_written_is_refused_before_placing(tmp_path, capsys, flag, path, message):
    (tmp_path / "file").write_text("")
    path, message = (x.replace("{tmp}", str(tmp_path)) for x in (path, message))
    assert run_cli(lambda: baselines_main(["--graph", "synthetic/1", "--placers", "single", flag, path])) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any placer ran
    assert captured.err == f"error: {message}\n"


def test_comparison_command_rejects_unknown_placer(capsys):
    assert run_cli(lambda: baselines_main(["--placers", "heft,magic"])) == 2
    assert "unknown placer 'magic'" in capsys.readouterr().err


@pytest.mark.slow
def test_graphs_command_lists_shipped_graphs(capsys):
    assert env_main(["graphs"]) == 0
    assert "default" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--json", "/proc/table.json"], ["--placements-dir", "/proc/placements"],
                                  ["--traces-dir", "/proc/a/b"]])
def test_an_output_that_cannot_be_written_is_refused_before_any_placer_runs(args, capsys):
    """/proc takes no new files, even from root: the check creates a file for real rather than trust modes."""
    from baselines.__main__ import main as baselines_main
    from placement_env.cli import run_cli

    assert run_cli(lambda: baselines_main(["--graph", "default", *args])) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: cannot write") and err.count("\n") == 1


def test_files_are_replaced_whole_or_not_at_all(tmp_path):
    """An error while writing leaves the old file and no temporary behind."""
    from placement_env.json_files import replace_atomically, write_json_file

    target = tmp_path / "placement.json"
    write_json_file([0, 1], target)
    with pytest.raises(RuntimeError), replace_atomically(target) as temporary:
        temporary.write_text("[2, 2")  # half written ...
        raise RuntimeError("killed")  # ... when the writer dies
    assert json.loads(target.read_text()) == [0, 1] and sorted(p.name for p in tmp_path.iterdir()) == ["placement.json"]
    write_json_file([1, 0], tmp_path / "p.json.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json.gz", "placement.json"]


STOP_IN_A_FINALIZER = """import os, signal, time
from placement_env.cli import Terminated, sigterm_as_interrupt

class Finalized:
    def __del__(self):  # the stop arrives here, as one did inside numba's compiler freeing a buffer
        os.kill(os.getpid(), signal.{name})
        for _ in range(10000):  # bytecodes: Python runs the handler before this __del__ ends
            pass

try:
    with sigterm_as_interrupt():
        Finalized()  # dropped at once
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)
    print("not stopped")
except KeyboardInterrupt as stop:
    print("stopped:", type(stop).__name__)
"""


@pytest.mark.parametrize("name, raised", [("SIGTERM", "Terminated"), ("SIGINT", "KeyboardInterrupt")])
def test_a_stop_that_comes_inside_a_finalizer_still_stops_the_command_and_prints_no_traceback(name, raised):
    import signal

    done = subprocess.run([sys.executable, "-c", STOP_IN_A_FINALIZER.replace("{name}", name)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal gives it
    assert done.stdout.strip() == f"stopped: {raised}", done.stderr
    assert done.stderr == ""
