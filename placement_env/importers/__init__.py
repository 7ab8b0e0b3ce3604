"""Graphs from models written elsewhere: :mod:`.pytorch` traces an ``nn.Module`` (torch is imported there
only, so the rest of the package runs without it)."""
