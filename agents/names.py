"""Names the command lines check before anything heavy is imported (torch takes seconds to load)."""

from placement_env.checks import checked_option

SB3_ALGORITHMS = ("ppo", "a2c", "maskable-ppo")
ALGORITHMS = SB3_ALGORITHMS + ("reinforce", "guided")
# the registry's names (graph_encoders.list_encoders(); tests/test_encoders.py holds the two equal)
ENCODER_NAMES = ("fadp-gt", "transformer", "gcn", "gat", "sage", "gnn", "graphormer", "placeto", "pgnn", "mamba")
# each encoder's options and their kinds, so that the command lines check --encoder-option before torch loads
# (graph_encoders.encoder_options(name) reads them from the constructors; tests/test_encoders.py holds them equal)
_SIZES = {"hidden_dim": "int", "num_layers": "int"}
ENCODER_OPTIONS: dict[str, dict[str, str]] = {
    "fadp-gt": {**_SIZES, "heads": "int", "tau": "float", "use_adjacency": "bool", "use_low": "bool",
                "use_high": "bool", "use_gap": "bool", "use_gmp": "bool", "dense_limit": "int"},
    "transformer": {**_SIZES, "heads": "int"},
    "gcn": dict(_SIZES),
    "gat": {**_SIZES, "heads": "int"},
    "sage": dict(_SIZES),
    "gnn": dict(_SIZES),
    "graphormer": {**_SIZES, "heads": "int", "max_degree": "int", "max_distance": "int"},
    "placeto": dict(_SIZES),
    "pgnn": {**_SIZES, "num_anchor_sets": "int", "max_distance": "int"},
    "mamba": {**_SIZES, "state": "int"},
}
ENCODER_OPTION_SMALLEST = {"dense_limit": 0}  # integer options are sizes and counts: >= 1 unless listed here


def check_encoder_options(encoder: str, options: dict) -> None:
    """Refuse an option ``encoder`` does not have, or a value of the wrong kind, naming it (without torch)."""
    accepted = ENCODER_OPTIONS[encoder]
    for key, value in options.items():
        if key not in accepted:
            raise ValueError(f"encoder {encoder!r} has no option {key!r}; its options: {', '.join(accepted)}")
        checked_option(f"encoder {encoder!r}", key, value, accepted[key], ENCODER_OPTION_SMALLEST.get(key, 1))
