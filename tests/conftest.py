import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def one_thread():
    """Torch on one thread in every test: the machines have 2 cores and pytest runs one test at a time."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def quick_annealing():
    """``anneal`` searches for 5 s by default; the tests that run every placer give it 0.05 s (its own tests set
    their budgets). Restored after the session."""
    from baselines import placers

    default = placers.PLACERS["anneal"]
    placers.PLACERS["anneal"] = placers.search_placers(0.05)["anneal"]
    yield
    placers.PLACERS["anneal"] = default
