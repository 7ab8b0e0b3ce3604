"""Training as a library: ``train(TrainConfig(...)) -> RunResult``, which ``train.py`` and the experiments run.

* :mod:`.config`: :class:`TrainConfig`, every setting of a run, checked when built;
* :mod:`.run`: :func:`train`, top to bottom (environments, model, learning, checkpoint, outputs);
* :mod:`.clock`: the search clock and Ctrl-C; :mod:`.tracker`: the best placements and learning curve;
* :mod:`.outputs`: the files a run writes, and its closing table.

    from agents.training import TrainConfig, train
    result = train(TrainConfig(graph="cifar10/0", devices=3, encoder="gat", budget_seconds=20, out="runs/gat"))
    print(result.makespan, result.lb_ratio)
"""

from typing import TYPE_CHECKING

from agents.training.config import TrainConfig, parse_encoder_options
from placement_env.lazy_names import lazy_attributes

_ON_FIRST_USE = {  # the run imports torch and stable-baselines3: loaded when first used
    **dict.fromkeys(("COMPARED_PLACERS", "closing_table"), "agents.training.outputs"),
    **dict.fromkeys(("CHECKPOINT", "RunResult", "train"), "agents.training.run"),
}

if TYPE_CHECKING:
    from agents.training.outputs import COMPARED_PLACERS, closing_table
    from agents.training.run import CHECKPOINT, RunResult, train
else:
    __getattr__ = lazy_attributes("agents.training", _ON_FIRST_USE, globals())

__all__ = ["CHECKPOINT", "COMPARED_PLACERS", "RunResult", "TrainConfig", "closing_table", "parse_encoder_options",
           "train"]
