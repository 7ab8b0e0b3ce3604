"""The steered annealing: a policy that draws the annealing's moves, its training problems and its pretraining.

* :mod:`.features`: what the policy reads of a placement (per unit, per unit and device, per stage boundary);
* :mod:`.critical_chain`: which units hold the simulated step up (design 2's unit features);
* :mod:`.draws`: the features and the policy's softmaxes, compiled for the annealing's steps;
* :mod:`.policy`: :class:`~agents.steering.policy.SteeringPolicy` (its weights, a JSON file) and
  :class:`~agents.steering.policy.SteeredProposals` (the annealing's neighbours drawn from it);
* :mod:`.problems`: the training problems as a JSON-lines file (``python -m agents.steering.problems``);
* :mod:`.training`: the pretraining by REINFORCE on the parameters (``python -m agents.steering.training``);
* :mod:`.placer`: the steered annealing as a placer (``python -m agents.place``'s default, the benchmark's
  ``steered``), and ``pretrained/`` the shipped policy.

``docs/steering.md`` says how it works and where it stands.
"""
