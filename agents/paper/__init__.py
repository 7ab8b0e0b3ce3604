"""The paper's experiments and the benchmark of the learned placer.

* the experiments (``python -m agents.experiments``): :mod:`.runs` (the runs and their cache), :mod:`.design`
  (what each table trains), :mod:`.cells`, :mod:`.tables`, :mod:`.findings` (sentences against the paper),
  :mod:`.figure` (figure 4), :mod:`.report` (headers and ``RESULTS.md``'s frame);
* the benchmark (``python -m agents.benchmark``): :mod:`.benchmark_cells` (cells and methods by name),
  :mod:`.benchmark` (running, caching, the table and the verdict), :mod:`.anytime` (the anytime curve);
* the encoder study (``python -m agents.experiments encoders``): :mod:`.encoders_command` (its command line),
  :mod:`.encoder_study` (equal pretraining, the held-out cells, the tables).
"""
