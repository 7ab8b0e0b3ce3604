"""Names the command lines check before anything heavy is imported (torch takes seconds to load)."""

SB3_ALGORITHMS = ("ppo", "a2c", "maskable-ppo")
ALGORITHMS = SB3_ALGORITHMS + ("reinforce", "guided")
# the registry's names (graph_encoders.list_encoders(); tests/test_encoders.py holds the two equal)
ENCODER_NAMES = ("fadp-gt", "transformer", "gcn", "gat", "sage", "gnn", "graphormer", "placeto", "pgnn", "mamba")
