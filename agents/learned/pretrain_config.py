"""What a pretraining is: :class:`PretrainConfig` (its problems, experts, stages and policy), checked when built
without loading torch, so that ``python -m agents.pretrain`` refuses bad settings at once."""

from __future__ import annotations

from dataclasses import dataclass, field

from placement_env.checks import checked_count, checked_finite

HELD_OUT_FIRST_SEED = 100  # the suites' seeds from here on are the benchmark's held-out graphs
TRAINING_SUITES = ("ptb", "cifar10", "nmt")
POLICY_STARTS = ("best-fast", "single")  # what the policy's observation shows (agents.learned.placer.start_units)
POLICY_HEADS = ("per-unit", "device-embedding")  # agents.policies.network.HEADS, named here without torch


@dataclass(frozen=True)
class PretrainConfig:
    """Pretraining settings (seconds for times). Frozen and checked when built (a ``ValueError`` names the field)."""

    suites: tuple[str, ...] = TRAINING_SUITES
    seeds: int = 48
    devices: tuple[int, ...] = (3, 5, 8)
    max_devices: int = 8
    expert_seconds: float = 1.5
    expert_steps: int | None = None
    improve_seconds: float = 1.0
    epochs: int = 12
    rounds: int = 1
    learning_rate: float = 1e-3
    encoder: str = "fadp-gt"
    encoder_kwargs: dict = field(default_factory=dict)
    start: str = "best-fast"
    seed: int = 0
    head: str = "per-unit"

    def __post_init__(self) -> None:
        checked_count("seeds", self.seeds, 1)
        if self.seeds > HELD_OUT_FIRST_SEED:
            raise ValueError(f"seeds: at most {HELD_OUT_FIRST_SEED} (seeds {HELD_OUT_FIRST_SEED} and up are held out "
                             f"for the benchmark), got {self.seeds}")
        for suite in self.suites:
            if suite not in TRAINING_SUITES + ("synthetic",):
                raise ValueError(f"suites: unknown training suite {suite!r}; use {', '.join(TRAINING_SUITES)}, "
                                 "synthetic")
        if not self.devices:
            raise ValueError("devices: give at least one device count")
        if self.head not in POLICY_HEADS:
            raise ValueError(f"head: use one of {', '.join(POLICY_HEADS)}, got {self.head!r}")
        for m in self.devices:
            checked_count("devices", m, 2)
            if m > self.max_devices and self.head == "per-unit":
                raise ValueError(f"devices: {m} is more than max_devices={self.max_devices} (the per-unit head's "
                                 "outputs; the device-embedding head takes any number)")
        for name in ("expert_seconds", "improve_seconds", "learning_rate"):
            if not checked_finite(name, getattr(self, name)) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.start not in POLICY_STARTS:
            raise ValueError(f"start: use one of {', '.join(POLICY_STARTS)}, got {self.start!r}")
        if self.expert_steps is not None:
            checked_count("expert_steps", self.expert_steps, 1)
        checked_count("epochs", self.epochs, 1)
        checked_count("rounds", self.rounds, 0)

    def padding(self, devices: int) -> int:
        """The device padding of a training problem on ``devices`` devices: ``max_devices`` for the per-unit head
        (its outputs), at least ``devices`` for the device-embedding head (no weight depends on it)."""
        return max(self.max_devices, devices)

    def problems(self) -> list[tuple[str, int]]:
        """``(graph name, device count)`` of every training problem."""
        return [(f"{suite}/{seed}", m) for suite in self.suites for seed in range(self.seeds) for m in self.devices]


def problem_key(name: str, devices: int) -> str:
    """The file name stem of a training problem: ``cifar10-3_5gpu`` for ``("cifar10/3", 5)``."""
    return f"{name.replace('/', '-')}_{devices}gpu"
