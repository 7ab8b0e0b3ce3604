"""Placement policies: what maps an observation to devices.

* :mod:`.network`: :class:`PlacementNetwork`, encoder + per-unit head (REINFORCE, the guided search, the
  pretrained placer);
* :mod:`.heads`: the per-unit device head and the value head;
* :mod:`.features_extractor`: the SB3 features extractor (a graph encoder) and the packed feature layout;
* :mod:`.distributions`: one categorical over (nodes, devices) for SB3;
* :mod:`.actor_critic`: :class:`PlacementPolicy` and :class:`MaskablePlacementPolicy`, for SB3's PPO / A2C and
  sb3_contrib's MaskablePPO.
"""

from .actor_critic import MaskablePlacementPolicy, PlacementPolicy
from .features_extractor import GraphFeaturesExtractor, observation_sizes
from .heads import NodeDeviceHead, ValueHead
from .network import PlacementNetwork

__all__ = ["GraphFeaturesExtractor", "MaskablePlacementPolicy", "NodeDeviceHead", "PlacementNetwork",
           "PlacementPolicy", "ValueHead", "observation_sizes"]
