"""Training as a library: ``train(TrainConfig(...)) -> RunResult``, which ``train.py`` and the experiments run.

* :mod:`.config`: :class:`TrainConfig`, every setting of a run, checked when built;
* :mod:`.run`: :func:`train`, top to bottom (environments, model, learning, checkpoint, outputs);
* :mod:`.clock`: the search clock and Ctrl-C; :mod:`.tracker`: the best placements and learning curve;
* :mod:`.outputs`: the files a run writes.

    from agents.training import TrainConfig, train
    result = train(TrainConfig(graph="cifar10/0", devices=3, encoder="gat", budget_seconds=20, out="runs/gat"))
    print(result.makespan, result.lb_ratio)
"""

from agents.training.config import TrainConfig, parse_encoder_options
from agents.training.outputs import COMPARED_PLACERS
from agents.training.run import CHECKPOINT, RunResult, train

__all__ = ["CHECKPOINT", "COMPARED_PLACERS", "RunResult", "TrainConfig", "parse_encoder_options", "train"]
