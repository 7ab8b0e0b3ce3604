"""What each experiment trains: :class:`Design` (its methods, graphs and device counts) and :func:`design`."""

from __future__ import annotations

from dataclasses import dataclass

from .runs import ENCODERS, ExperimentConfig, Run, suite_graphs

# table 4 rows (the paper's order): adjacency matrix, high frequency, low frequency
FAGA_ROWS = ((False, False, False), (True, False, False), (False, True, False), (False, False, True),
             (False, True, True), (True, True, True))
# table 5 rows: global average pooling, global max pooling
DPFR_ROWS = ((False, False), (True, False), (False, True), (True, True))


@dataclass(frozen=True)
class Design:
    """The runs one experiment tabulates: every method (label -> (encoder, options)) on every column's graphs
    (column -> graph names) at every device count, each seed."""

    methods: dict[str, tuple[str, tuple]]
    graphs_of: dict[str, list[str]]
    devices: tuple[int, ...]

    def runs(self, seeds: int) -> list[Run]:
        """Every run of the design, ``seeds`` seeds each."""
        return [Run(encoder, g, d, seed, options, label) for graphs in self.graphs_of.values() for d in self.devices
                for label, (encoder, options) in self.methods.items() for seed in range(seeds) for g in graphs]

    def placer_columns(self) -> list[tuple[tuple[str, ...], int]]:
        """The (graphs, device count) the classical placers' rows are computed for."""
        return [(tuple(graphs), d) for graphs in self.graphs_of.values() for d in self.devices]


def _flags(names: tuple[str, ...], values: tuple[bool, ...]) -> str:
    return ", ".join(f"{n} {'✓' if v else '×'}" for n, v in zip(names, values))


def faga_methods() -> dict[str, tuple[str, tuple]]:
    """Table 4's rows: FADP-GT with the adjacency matrix, high- and low-frequency terms switched off and on."""
    methods = {}
    for i, (adj, high, low) in enumerate(FAGA_ROWS, start=1):
        label = f"{i}: {_flags(('adjacency', 'high', 'low'), (adj, high, low))}"
        methods[label] = ("fadp-gt", () if (adj and high and low) else
                          (("use_adjacency", adj), ("use_high", high), ("use_low", low)))
    return methods


def dpfr_methods() -> dict[str, tuple[str, tuple]]:
    """Table 5's rows: FADP-GT with the average- and max-pooling branches switched off and on."""
    methods = {}
    for i, (gap, gmp) in enumerate(DPFR_ROWS, start=1):
        label = f"{i}: {_flags(('GAP', 'GMP'), (gap, gmp))}"
        methods[label] = ("fadp-gt", () if (gap and gmp) else (("use_gap", gap), ("use_gmp", gmp)))
    return methods


def design(experiment: str, settings: ExperimentConfig) -> Design:
    """The runs of ``experiment`` (table2, table3 and figure4 share theirs)."""
    if experiment == "table6":
        return Design({"placeto": ("placeto", ()), "fadp-gt": ("fadp-gt", ())}, {m: [m] for m in settings.models},
                      (settings.model_devices,))
    methods = {"table4": faga_methods, "table5": dpfr_methods}.get(experiment, lambda: {e: (e, ()) for e in ENCODERS})
    return Design(methods(), suite_graphs(settings), settings.devices)
