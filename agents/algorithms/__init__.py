"""Training algorithms, each with stable-baselines3's interface, and the checkpoint format they share.

* :mod:`.checkpoint`: the checkpoint file (:func:`read_checkpoint`, :func:`write_checkpoint`);
* :mod:`.base`: :class:`PlacementAlgorithm`, what REINFORCE and the guided search share (``learn`` set-up,
  ``predict``, ``save`` / ``load`` from plain data);
* :mod:`.reinforce`: the paper's REINFORCE agent;
* :mod:`.problem` and :mod:`.search_rounds`: the guided search's problem and its loop (propose, improve,
  learn); :mod:`.guided_search`: :class:`GuidedSearch`, that loop as a training algorithm;
* :mod:`.registry`: every algorithm by name (:func:`make_model`, :func:`save_checkpoint`, :func:`load_model`);
* :mod:`.rollout`: a trained policy placing a graph by acting in the environment.

The names load on first use (torch and stable-baselines3 take seconds).
"""

from typing import TYPE_CHECKING

from placement_env.lazy_names import lazy_attributes

_ON_FIRST_USE = {
    **dict.fromkeys(("Checkpoint", "read_checkpoint", "write_checkpoint"), "agents.algorithms.checkpoint"),
    "PlacementAlgorithm": "agents.algorithms.base",
    **dict.fromkeys(("Reinforce", "ReinforceConfig", "load_network", "save_network", "train_reinforce"),
                    "agents.algorithms.reinforce"),
    "PlacementProblem": "agents.algorithms.problem",
    **dict.fromkeys(("SearchRoundsConfig", "SearchRoundsResult", "search_rounds"), "agents.algorithms.search_rounds"),
    "GuidedSearch": "agents.algorithms.guided_search",
    **dict.fromkeys(("PROJECT_ALGORITHMS", "load_model", "make_agent", "make_model", "make_sb3", "save_checkpoint"),
                    "agents.algorithms.registry"),
    **dict.fromkeys(("greedy_placement", "place_graph", "policy_placement", "rollout"), "agents.algorithms.rollout"),
}

if TYPE_CHECKING:
    from agents.algorithms.base import PlacementAlgorithm
    from agents.algorithms.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
    from agents.algorithms.guided_search import GuidedSearch
    from agents.algorithms.problem import PlacementProblem
    from agents.algorithms.registry import (
        PROJECT_ALGORITHMS,
        load_model,
        make_agent,
        make_model,
        make_sb3,
        save_checkpoint,
    )
    from agents.algorithms.reinforce import Reinforce, ReinforceConfig, load_network, save_network, train_reinforce
    from agents.algorithms.rollout import greedy_placement, place_graph, policy_placement, rollout
    from agents.algorithms.search_rounds import SearchRoundsConfig, SearchRoundsResult, search_rounds
else:
    __getattr__ = lazy_attributes("agents.algorithms", _ON_FIRST_USE, globals())

__all__ = ["Checkpoint", "GuidedSearch", "PROJECT_ALGORITHMS", "PlacementAlgorithm", "PlacementProblem", "Reinforce",
           "ReinforceConfig", "SearchRoundsConfig", "SearchRoundsResult", "greedy_placement", "load_model",
           "load_network", "make_agent", "make_model", "make_sb3", "place_graph", "policy_placement",
           "read_checkpoint", "rollout", "save_checkpoint", "save_network", "search_rounds", "train_reinforce",
           "write_checkpoint"]
