"""python -m agents.experiments: every experiment's --quick mode gives a table with every row; shared runs
are trained once; the aggregation by hand."""

import numpy as np
import pytest

from agents import experiments as cli
from agents.paper import design, tables
from agents.paper import runs as ex
from agents.paper.cells import Cell


def stub_run(run, settings):
    """A run's results without training: a makespan that depends on the run, so rows and cells differ."""
    makespan = 1e-3 * (1 + sum(map(ord, run.encoder + run.graph + str(run.options))) % 97 / 100 + run.devices / 10)
    return {"seed": run.seed, "oom": False, "makespan": makespan, "lb_ratio": 1.5, "best_found_seconds": 0.5,
            "validation_seconds": 0.01, "search_seconds": 1.0, "steps": 100,
            "curve": [[0, 2 * makespan], [50, 1.2 * makespan], [100, makespan]]}


def stub_placers(graph_names, devices):
    return {name: (2e-3 + i * 1e-4, 0.01) for i, name in enumerate(ex.PLACERS)} | {"lower bound": (5e-4, 0.0)}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Every experiment's table, from stubbed runs and placers: the layout, not the numbers."""
    out = tmp_path_factory.mktemp("experiments")
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        def recorded(run, settings):
            calls.append(run)
            return stub_run(run, settings)

        patch.setattr(ex, "train_run", recorded)
        patch.setattr(ex, "placer_rows", stub_placers)
        assert cli.main(["all", "--quick", "--budget-seconds", "1", "--out", str(out)]) == 0
    out.joinpath("distinct_runs.txt").write_text(str(len({r.key({}) for r in calls})))
    return out


def table_rows(path):
    return [line for line in path.read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]


@pytest.mark.parametrize("table, methods", [
    ("table2", list(ex.ENCODERS)), ("table3", list(ex.ENCODERS)),
    ("table4", [f"{i}:" for i in range(1, 7)]), ("table5", [f"{i}:" for i in range(1, 5)])])
def test_quick_tables_have_every_row(quick, table, methods):
    rows = table_rows(quick / f"{table}.md")
    for suite in ex.SUITES:
        names = [r.split("|")[1].strip() for r in rows if r.split("|")[2].strip() == suite]
        expected = methods + [f"*{p}*" for p in ex.PLACERS] + ["*lower bound*"]
        assert [n.split(":")[0] + ":" if ":" in n else n for n in names] == expected, (table, suite, names)
    assert "Command: `python -m agents.experiments all --quick" in (quick / f"{table}.md").read_text()
    assert (quick / f"{table}.csv").read_text().count("\n") > 3


def test_quick_table6_and_figure4(quick):
    rows = table_rows(quick / "table6.md")
    for model in ex.QUICK["models"]:
        names = [r.split("|")[1].strip() for r in rows if r.split("|")[2].strip() == model]
        assert names == ["placeto", "fadp-gt"] + [f"*{p}*" for p in ex.PLACERS] + ["*lower bound*"]
    assert (quick / "figure4.png").stat().st_size > 10_000
    stub = {(r.split("|")[1].strip(), r.split("|")[2].strip()): r.split("|")[3].strip() for r in rows}
    assert stub[("*heft*", "vgg19")] == f"{stub_placers([], 3)['heft'][0] * 1e3:.3f}"
    assert len(table_rows(quick / "figure4.md")) == len(ex.ENCODERS) * len(ex.SUITES)


def test_tables_share_runs(quick):
    suites, models = len(ex.SUITES), len(ex.QUICK["models"])
    # table2 (table3 and figure4 reuse it); table4 and table5 add their variants but share the full FADP-GT
    assert int((quick / "distinct_runs.txt").read_text()) == suites * (len(ex.ENCODERS) + 5 + 3) + 2 * models


@pytest.mark.slow
def test_real_quick_runs_are_trained_once_and_cached(tmp_path):
    """Real training (1 s per run): every run of a table in the run cache; a second invocation trains nothing."""
    assert cli.main(["table5", "--quick", "--budget-seconds", "1", "--out", str(tmp_path)]) == 0
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == len(ex.SUITES) * len(design.DPFR_ROWS)
    assert all((r / ex.CACHE_ENTRY).exists() and (r / "checkpoint.zip").exists() for r in runs)
    stamps = [(r / ex.CACHE_ENTRY).stat().st_mtime_ns for r in runs]
    assert cli.main(["table5", "--quick", "--budget-seconds", "1", "--out", str(tmp_path)]) == 0
    assert [(r / ex.CACHE_ENTRY).stat().st_mtime_ns for r in sorted((tmp_path / "runs").iterdir())] == stamps
    rows = table_rows(tmp_path / "table5.md")
    assert len(rows) == len(ex.SUITES) * (len(design.DPFR_ROWS) + len(ex.PLACERS) + 1)


def test_cells_and_improvements_by_hand():
    runs = [{"seed": 0, "oom": False, "makespan": 2.0, "best_found_seconds": 1.0, "validation_seconds": 0.5},
            {"seed": 0, "oom": False, "makespan": 4.0, "best_found_seconds": 3.0, "validation_seconds": 0.5},
            {"seed": 1, "oom": True, "makespan": 1.0, "best_found_seconds": None, "validation_seconds": 0.1}]
    cell = Cell.of(runs, 2)
    assert cell.exe == [3.0, float("inf")] and cell.com == [2.5, 0.1]
    assert tables._mean_spread([1.0, 3.0], 1e3, 1) == "2000.0 ± 1000.0"
    assert tables._mean_spread([1.0, float("inf")], 1.0, 1) == "OOM"
    assert tables._improvement([4.0], [5.0]) == "+20.00%" and tables._improvement([6.0], [5.0]) == "-20.00%"
    assert tables._improvement([np.inf], [5.0]) == "-"


@pytest.mark.parametrize("args, message", [
    (["--devices", "3", "0"], "--devices and --model-devices must be >= 1, got [3, 0] and 3"),
    (["--budget-seconds", "nan"], "--budget-seconds must be positive and finite, got nan"),
    (["--initial-placement", "best"], "unknown --initial-placement 'best'"),
    (["--hidden-dim", "0"], "--hidden-dim must be >= 1, got 0"),
    (["--results", "{tmp}"], "is a folder; give a file name to write"),  # not found out after every run
    (["--results", "{tmp}/no/results.md"], "folder '{tmp}/no' does not exist"),
])
def test_bad_settings_are_refused_before_any_run(tmp_path, capsys, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    with pytest.raises(SystemExit) as info:
        cli.main(["table2", "--quick", "--out", str(tmp_path / "out"), *args])
    assert info.value.code == 2
    assert message.replace("{tmp}", str(tmp_path)) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing trained, nothing written


def test_rewriting_the_results_file_keeps_sections_the_experiments_do_not_write(tmp_path, monkeypatch):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nold intro\n\n## table5\n\nold table\n\n## Memory-bound cells\n\nkept as it is\n")
    monkeypatch.setattr(ex, "train_run", stub_run)
    monkeypatch.setattr(ex, "placer_rows", stub_placers)
    assert cli.main(["table5", "--quick", "--out", str(tmp_path / "out"), "--results", str(results)]) == 0
    text = results.read_text()
    assert "old table" not in text and "old intro" not in text and text.count("## table5") == 1
    assert text.endswith("## Memory-bound cells\n\nkept as it is\n")
