"""The Gymnasium environments: the placement task they share, the two MDPs, rendering, registration.

* :mod:`.task`: graphs, cluster, padding, observations and start states, shared by both;
* :mod:`.device_placement`: ``DevicePlacement-v0``, every unit's device per step;
* :mod:`.sequential`: ``DevicePlacementSequential-v0``, one unit per step (Placeto's MDP);
* :mod:`.starts`: where episodes start, and how the placers of :mod:`baselines` (above this package) are found;
* :mod:`.render`: Gantt charts; :mod:`.registration`: the Gymnasium ids.

Nothing is imported here, so registering the ids (:mod:`placement_env` does it on import) does not load
the environments, nor the placers they start episodes from.
"""
