"""The transformers of the zoo (shipped graphs, loaded by name) and from_huggingface on configs."""

import numpy as np
import pytest
import torch
import transformers
from torch import nn

from baselines import place
from placement_env import Cluster, from_torch, load_graph, simulate
from placement_env.importers.huggingface import from_huggingface
from placement_env.sim.pipeline import Step
from placement_env.zoo.registry import SUITES, TRANSFORMERS, list_graphs

# parameters of each (millions): GPT-2 124 / 355, BERT 110 / 335 (with its masked-LM head), TinyLlama's shape 1,100,
# ViT-B/16 86 (with its classifier)
PARAMETERS_M = {"gpt2": 124, "gpt2-medium": 355, "bert-base": 110, "bert-large": 335, "llama-1b": 1100,
                "vit-b16": 86}


@pytest.mark.parametrize("name", list(TRANSFORMERS))
def test_each_transformer_loads_by_name_as_a_bf16_training_graph_with_module_names(name):
    g = load_graph(name)
    assert name in list_graphs() and name in SUITES["transformers"]
    assert {n.phase for n in g.nodes} == {"forward", "backward"} and g.batch is not None and g.batch >= 8
    assert g.param_bytes.sum() / 2 / 1e6 == pytest.approx(PARAMETERS_M[name], rel=0.01)  # bfloat16: 2 bytes
    assert all(n.module is not None for n in g.nodes if not n.op.startswith("input"))  # the inputs: no module
    layer = {"gpt2": "transformer.h.0.", "gpt2-medium": "transformer.h.23.", "llama-1b": "model.layers.21.",
             "vit-b16": "vit.layers.11."}.get(name, "bert.encoder.layer.0.")  # a layer's modules are named
    assert any((n.module or "").startswith(layer) for n in g.nodes)


def test_a_transformer_pipelines_on_a_node_of_a100s():
    g = load_graph("gpt2")
    c = Cluster.preset("a100-nvlink", 8, per_node=8)
    one = simulate(g, np.zeros(g.num_nodes, np.int64), c, microbatches=8).makespan
    split = place(g, c, "split", step=Step(8, "1f1b"))
    assert simulate(g, split, c, microbatches=8).makespan < one


def test_tied_weights_are_one_parameter():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.out = nn.Linear(16, 100, bias=False)
            self.out.weight = self.embed.weight

        def forward(self, ids):
            return self.out(self.embed(ids))

    g = from_torch(Tied(), (torch.randint(0, 100, (4, 8)),), training=False)
    assert g.param_bytes.sum() == 100 * 16 * 4
    assert "parameter" in g.ops  # read by both layers: a parameter op of its own


def test_from_huggingface_builds_any_config():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=128,
                                     bos_token_id=0, eos_token_id=0)
    g = from_huggingface(config, batch=4, sequence=32, name="tiny-gpt2")
    assert g.name == "tiny-gpt2" and g.batch == 4
    assert g.nodes[g.ops.index("embedding")].output_bytes == 4 * 32 * 64 * 2  # bfloat16 activations
    vit = from_huggingface(transformers.ViTConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                                  intermediate_size=128, image_size=32, patch_size=8), batch=2)
    assert vit.batch == 2 and "conv2d" in vit.ops
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        from_huggingface(config, batch=0)
    with pytest.raises(ValueError, match="config must be a transformers PretrainedConfig"):
        from_huggingface({"n_layer": 2})


def test_from_huggingface_is_importable_from_the_package_builds_without_memory_and_checks_its_sizes(monkeypatch):
    import placement_env
    from placement_env.graph.io import graph_digest
    from placement_env.importers.huggingface import build_model, example_inputs

    assert placement_env.from_huggingface is from_huggingface
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    built, real_from_config = [], transformers.AutoModelForCausalLM.from_config

    def recorded(cls, *args, **kwargs):
        built.append(real_from_config(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", classmethod(recorded))
    g = from_huggingface(config, batch=2, sequence=16, name="gpt2")
    assert all(p.is_meta for p in built[0].parameters())  # no weights allocated
    monkeypatch.undo()
    model = build_model(config, torch.bfloat16)  # the same graph as from a model with weights
    real = from_torch(model, (), example_kwargs=example_inputs(config, 2, 16), device_kind="a100-nvlink",
                      dtype=torch.bfloat16, name="gpt2")
    assert graph_digest(g) == graph_digest(real)
    with pytest.raises(ValueError, match="sequence 64 is longer than the 32 positions of the gpt2 config"):
        from_huggingface(config, sequence=64)
    with pytest.raises(ValueError, match="batch 1000000000 is more than the 1048576"):
        from_huggingface(config, batch=10**9, sequence=16)


def test_deepspeed_lists_a_transformer_by_its_blocks():
    from baselines.placers import RUNTIME_DEFAULTS
    from placement_env.plan.module_tree import layer_sequence

    g = load_graph("gpt2")
    layers = layer_sequence(g)
    assert layers[:2] == ["transformer.wte", "transformer.wpe"] and layers[-2:] == ["transformer.ln_f", "lm_head"]
    assert [f"transformer.h.{i}" for i in range(12)] == [x for x in layers if ".h." in x]
    assert len(layer_sequence(load_graph("bert-base"))) == 14  # embeddings, 12 BertLayers, the head
    c = Cluster.preset("a100-nvlink", 8)
    assert len(set(RUNTIME_DEFAULTS["deepspeed-uniform"](g, c, 0).tolist())) == 8


def test_the_transformer_tables_cache_serves_a_row_only_for_the_settings_it_was_made_with(tmp_path, monkeypatch):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "transformer_placers.py"
    spec = importlib.util.spec_from_file_location("transformers_tables", path)
    tables = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(path.parent))
    spec.loader.exec_module(tables)
    runs = []

    def run_row(graph, cluster, step, contiguous, budget):
        runs.append(budget)
        return {"graph": graph.name, "cluster": cluster.name, "microbatches": step.microbatches,
                "schedule": step.schedule, "contiguous": contiguous, "budget_seconds": budget, "rows": []}

    monkeypatch.setattr(tables, "run_row", run_row)
    graph, cluster = load_graph("gpt2"), Cluster.preset("a100-nvlink", 8)
    args = (tmp_path, "gpt2_8_m1", False, graph, cluster, Step(1), False)
    tables.cached_row(*args, 10.0)
    tables.cached_row(*args, 10.0)  # made with these settings: served
    assert runs == [10.0]
    tables.cached_row(*args, 1.0)  # another budget: run again, not the 10-s row under a 1-s heading
    assert runs == [10.0, 1.0]
    (tmp_path / "gpt2_8_m1.json").write_text(json.dumps({"graph": "gpt2"})[:-3])  # a truncated row
    tables.cached_row(*args, 1.0)
    assert runs == [10.0, 1.0, 1.0]
