"""Graphs by name: ``load_graph("cifar10/3")``, ``load_graph("resnet50")``, a path, or a graph object.

Shipped names:

* ``ptb/<seed>``, ``cifar10/<seed>``, ``nmt/<seed>``: the paper's benchmark
  suites, traced from seeded PyTorch models (:mod:`placement_env.zoo.suites`);
  seeds 0..16 ship as files, seeds from 100 up are held out and traced on
  demand;
* the real models of the paper's table 6 (:data:`REAL_MODELS`), shipped as
  files when extracted by ``scripts/extract_real_models.py``;
* ``synthetic/<seed>``: the training graph of a seeded layered DAG of
  ``SYNTHETIC_FORWARD_OPS`` forward ops (twice as many ops in all), with the
  default :class:`~placement_env.graph.synthetic.LayeredDagConfig` distributions;
* ``default``: ``cifar10/0``, the graph of the README's main command.

Suites (:func:`load_suite`): ``ptb``, ``cifar10``, ``nmt`` and ``synthetic``
are seeds 0..16 of their family (17 graphs each, as in the paper); ``real``
is the real models.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from placement_env.graph.io import read_graph
from placement_env.graph.model import ComputationGraph
from placement_env.graph.synthetic import layered_dag
from placement_env.zoo.suites import SUITE_NAMES, SUITE_SEEDS, load_suite_graph

SYNTHETIC_FORWARD_OPS = 300
DEFAULT_GRAPH = "cifar10/0"
_SEEDED = re.compile(r"(synthetic|ptb|cifar10|nmt)/(\d+)")
REAL_MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"
# the real models of the paper's table 6 (file stem -> description)
REAL_MODELS: dict[str, str] = {
    "vgg19": "VGG19 (torchvision)", "inception_v3": "InceptionV3 (torchvision)",
    "resnet50": "ResNet50 (torchvision)", "resnet101": "ResNet101 (torchvision)",
    "nasnet_large": "NASNet-A large (timm nasnetalarge)", "pnasnet_large": "PNASNet-5 large (timm pnasnet5large)",
}

TRANSFORMERS_DIR = Path(__file__).resolve().parent / "data" / "transformers"
# the transformers of the zoo (file stem -> description), extracted by scripts/extract_transformers.py
TRANSFORMERS: dict[str, str] = {
    "gpt2": "GPT-2 small (124 M), batch 8 x 1,024 tokens",
    "gpt2-medium": "GPT-2 medium (355 M), batch 8 x 1,024 tokens",
    "bert-base": "BERT-base (110 M, masked LM), batch 32 x 512 tokens",
    "bert-large": "BERT-large (335 M, masked LM), batch 32 x 512 tokens",
    "llama-1b": "a Llama-style decoder of TinyLlama-1.1B's shape, batch 8 x 2,048 tokens",
    "vit-b16": "ViT-B/16 (86 M), batch 64 x 224 x 224",
}


def load_graph(source: str | os.PathLike | ComputationGraph) -> ComputationGraph:
    """A graph from a shipped name, a ``.json`` / ``.json.gz`` path, or a graph object (returned as is).

    Raises:
        ValueError: for a name that is neither an existing file nor a shipped graph.
    """
    if isinstance(source, ComputationGraph):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"a graph must be a name, a path or a ComputationGraph, got {type(source).__name__}")
    text = os.fspath(source)
    if Path(text).is_file():
        return read_graph(text)
    if text == "default":
        text = DEFAULT_GRAPH
    match = _SEEDED.fullmatch(text)
    if match:
        family, seed = match.group(1), int(match.group(2))
        if family == "synthetic":
            return layered_dag(seed, training=True, name=text, num_ops=SYNTHETIC_FORWARD_OPS)
        return load_suite_graph(family, seed)
    for names, folder, what, script in ((REAL_MODELS, REAL_MODELS_DIR, "real model", "extract_real_models"),
                                        (TRANSFORMERS, TRANSFORMERS_DIR, "transformer", "extract_transformers")):
        if text in names:
            path = folder / f"{text}.json.gz"
            if not path.is_file():
                raise FileNotFoundError(f"{what} {text!r} is not shipped in this install ({path} is missing); "
                                        f"extract it with scripts/{script}.py")
            return read_graph(path)
    if text.endswith((".json", ".json.gz")):
        raise FileNotFoundError(f"graph file {text!r} does not exist")
    near = nearest_names(text)
    hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    raise ValueError(f"unknown graph {text!r}: not an existing file and not a shipped graph{hint} "
                     f"(shipped: {', '.join(list_graphs())})")


def nearest_names(text: str, count: int = 3) -> list[str]:
    """Up to ``count`` shipped graph names closest to ``text`` (``difflib``'s ratio; ``<seed>`` names are
    matched with ``text``'s own seed, or 0)."""
    match = re.search(r"(\d+)$", text)
    seed = match.group(1) if match else "0"
    names = [name.replace("<seed>", seed) for name in list_graphs()]
    return difflib.get_close_matches(text, names, n=count, cutoff=0.5)


SUITES: dict[str, list[str]] = {name: [f"{name}/{seed}" for seed in SUITE_SEEDS] for name in SUITE_NAMES}
SUITES["synthetic"] = [f"synthetic/{seed}" for seed in SUITE_SEEDS]
SUITES["real"] = list(REAL_MODELS)
SUITES["transformers"] = list(TRANSFORMERS)


def load_suite(name: str) -> list[ComputationGraph]:
    """The graphs of a suite (see :data:`SUITES`)."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    return [load_graph(g) for g in SUITES[name]]


def list_graphs() -> list[str]:
    """The names :func:`load_graph` knows (``<seed>`` stands for any non-negative integer)."""
    return (["default"] + [f"{name}/<seed>" for name in SUITE_NAMES] + ["synthetic/<seed>"]
            + [m for m in REAL_MODELS if (REAL_MODELS_DIR / f"{m}.json.gz").is_file()]
            + [m for m in TRANSFORMERS if (TRANSFORMERS_DIR / f"{m}.json.gz").is_file()])
