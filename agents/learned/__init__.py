"""The pretrained learned placer: place a graph with a pretrained policy, and make such a policy.

* :mod:`.placer`: :func:`~agents.learned.placer.place` (zero-shot or fine-tuned), what ``agents.place(graph,
  cluster)`` and ``python -m agents.place`` call; :mod:`.result`: what it returns; :mod:`.report`: what the
  command prints beside it;
* :mod:`.pretrain_config` and :mod:`.pretraining`: expert placements, imitation, expert iteration
  (``python -m agents.pretrain``);
* :mod:`.policy_file`: the policy as a file, and the shipped one (``pretrained/policy.zip``).
"""
