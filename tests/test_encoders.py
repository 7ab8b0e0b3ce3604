"""Graph encoders: shapes, padding, permutations, gradients, FADP-GT's switches and spectral cache."""

from typing import Any, cast

import gymnasium as gym
import numpy as np
import pytest
import torch

import placement_env  # noqa: F401
from graph_encoders import ENCODERS, FADPGT, GraphBatch, Transformer, build_encoder, list_encoders
from graph_encoders.spectral import frequency_maps_chebyshev, frequency_maps_dense
from graph_encoders.structure import symmetric_adjacency
from placement_env import layered_dag
from placement_env.graph.units import unit_graph

G1 = layered_dag(3, num_ops=14, name="g1")
G2 = layered_dag(4, num_ops=20, name="g2")
EQUIVARIANT = ["fadp-gt", "transformer", "gcn", "gat", "sage", "gnn", "graphormer", "placeto"]


def observation(graph, max_nodes=None, flatten=False, seed=0, max_edges=200):
    env = gym.make("DevicePlacement-v0", graph=graph, max_nodes=max_nodes, flatten=flatten, max_edges=max_edges,
                   initial_placement="random").unwrapped
    return env.reset(seed=seed)[0]


def stack(observations):
    return {k: torch.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}


def make(name, in_dim, **kw):
    torch.manual_seed(0)
    return build_encoder(name, in_dim, hidden_dim=16, **kw).eval()


def test_registry_lists_every_encoder_of_the_paper():
    assert set(list_encoders()) == {"fadp-gt", "transformer", "gcn", "gat", "sage", "gnn", "graphormer", "placeto",
                                    "pgnn", "mamba"}
    with pytest.raises(ValueError, match="unknown encoder 'bert'"):
        build_encoder("bert", 4)


@pytest.mark.parametrize("name, options, message", [
    ("gcn", {"hidden_dim": 0}, "encoder 'gcn': option 'hidden_dim' must be an integer >= 1, got 0"),
    ("fadp-gt", {"num_layers": -1}, "option 'num_layers' must be an integer >= 1, got -1"),
    ("gat", {"heads": 0}, "option 'heads' must be an integer >= 1, got 0"),
    ("fadp-gt", {"tau": float("nan")}, "option 'tau' must be a finite number, got nan"),
    ("fadp-gt", {"use_low": 0}, "option 'use_low' must be true or false, got 0"),
    ("transformer", {"heads": 3}, "hidden size 16 is not divisible by 3 heads"),  # torch would only assert
    ("fadp-gt", {"heads": 3}, "hidden size 16 is not divisible by 3 heads"),
    ("gcn", {"depth": 2}, "encoder 'gcn' has no option 'depth'"),
])
def test_bad_options_are_named(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_encoder(name, 8, **{"hidden_dim": 16, **options})


def test_numpy_integers_and_an_integer_tau_are_accepted():
    encoder = build_encoder("fadp-gt", np.int64(8), hidden_dim=np.int64(16), tau=1, dense_limit=0)
    assert encoder.in_dim == 8 and encoder.out_dim == 16


@pytest.mark.parametrize("name", list(ENCODERS))
def test_output_shapes_and_zero_padding(name):
    n = max(unit_graph(G1).num_units, unit_graph(G2).num_units)
    obs = stack([observation(G1, max_nodes=n), observation(G2, max_nodes=n)])
    batch = GraphBatch.from_observation(obs)
    enc = make(name, batch.x.shape[-1])
    nodes, graph = enc(batch)
    assert nodes.shape == (2, n, 16) and graph.shape == (2, 16)
    n1 = unit_graph(G1).num_units
    assert torch.all(nodes[0, n1:] == 0)  # padding rows of the smaller graph
    assert torch.isfinite(nodes).all() and torch.isfinite(graph).all()


@pytest.mark.parametrize("name", list(ENCODERS))
def test_padding_invariance(name):
    n = unit_graph(G1).num_units
    small = GraphBatch.from_observation(observation(G1, max_nodes=n))
    padded = GraphBatch.from_observation(observation(G1, max_nodes=n + 9))
    enc = make(name, small.x.shape[-1])
    with torch.no_grad():
        a_nodes, a_graph = enc(small)
        b_nodes, b_graph = enc(padded)
    torch.testing.assert_close(a_nodes[0, :n], b_nodes[0, :n], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a_graph, b_graph, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", EQUIVARIANT)
def test_permutation_equivariance(name):
    obs = observation(G2)
    n = obs["node_mask"].shape[0]
    perm = np.random.default_rng(0).permutation(n)
    inverse = np.argsort(perm)
    permuted = dict(obs)
    permuted["embedding"] = obs["embedding"][perm]
    permuted["edge_index"] = inverse[obs["edge_index"]] * obs["edge_mask"][None, :]
    enc = make(name, obs["embedding"].shape[-1])
    with torch.no_grad():
        nodes, graph = enc(GraphBatch.from_observation(obs))
        p_nodes, p_graph = enc(GraphBatch.from_observation(permuted))
    torch.testing.assert_close(p_nodes[0], nodes[0][perm], atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(p_graph, graph, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", list(ENCODERS))
def test_gradients_reach_every_parameter(name):
    batch = GraphBatch.from_observation(stack([observation(G2, seed=0), observation(G2, seed=1)]))
    enc = make(name, batch.x.shape[-1]).train()
    nodes, graph = enc(batch)
    (nodes.square().mean() + graph.square().mean() + nodes[:, :3].sum()).backward()
    for pname, p in enc.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


def test_fadp_gt_alpha_beta_receive_gradient():
    batch = GraphBatch.from_observation(observation(G2))
    enc = make("fadp-gt", batch.x.shape[-1]).train()
    nodes, _ = enc(batch)
    nodes.square().mean().backward()
    for layer in enc.faga:
        assert layer.mix.grad is not None and layer.mix.grad.abs().sum() > 0
        ab = layer.alpha_beta()
        assert torch.isclose(ab.sum(), torch.tensor(1.0))


def test_fadp_gt_with_every_switch_off_is_the_transformer():
    batch = GraphBatch.from_observation(stack([observation(G1, max_nodes=30), observation(G2, max_nodes=30)]))
    f = batch.x.shape[-1]
    torch.manual_seed(1)
    plain = FADPGT(f, hidden_dim=16, heads=4, use_adjacency=False, use_low=False, use_high=False,
                   use_gap=False, use_gmp=False).eval()
    transformer = Transformer(f, hidden_dim=16, heads=4).eval()
    transformer.embed.load_state_dict(plain.embed.state_dict())
    for faga, layer in zip(cast(Any, plain.faga), cast(Any, transformer.layers)):
        layer.attention.in_proj_weight.data = torch.cat([faga.q.weight, faga.k.weight, faga.v.weight]).data.clone()
        layer.attention.in_proj_bias.data = torch.cat([faga.q.bias, faga.k.bias, faga.v.bias]).data.clone()
        layer.attention.out_proj.load_state_dict(faga.out.state_dict())
        layer.norm.load_state_dict(faga.norm.state_dict())
    with torch.no_grad():
        a_nodes, a_graph = plain(batch)
        b_nodes, b_graph = transformer(batch)
    torch.testing.assert_close(a_nodes, b_nodes, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a_graph, b_graph, atol=1e-5, rtol=1e-4)
    full = FADPGT(f, hidden_dim=16).eval()
    with torch.no_grad():
        assert not torch.allclose(full(batch)[0], b_nodes, atol=1e-3)  # the switches do change the output


def test_spectral_cache_is_hit_on_the_second_call():
    batch = GraphBatch.from_observation(observation(G2))
    enc = make("fadp-gt", batch.x.shape[-1])
    enc(batch)
    misses, hits = enc.spectral_cache.misses, enc.spectral_cache.hits
    assert misses == 1
    enc(batch)
    assert enc.spectral_cache.misses == misses and enc.spectral_cache.hits > hits
    other = GraphBatch.from_observation(observation(G1, max_nodes=batch.max_nodes))
    enc(other)
    assert enc.spectral_cache.misses == 2  # a different graph is computed, not confused with the first


def test_chebyshev_spectral_path_approximates_the_eigen_decomposition():
    ug = unit_graph(layered_dag(0, num_ops=120))
    a = symmetric_adjacency(ug.edges, ug.num_units)
    exact_low, exact_high = frequency_maps_dense(a)
    approx_low, approx_high = frequency_maps_chebyshev(a)
    assert np.linalg.norm(approx_low - exact_low) / np.linalg.norm(exact_low) < 0.1
    assert np.linalg.norm(approx_high - exact_high) / np.linalg.norm(exact_high) < 0.1
    # projections split A_s: A_low + A_high + cross terms = A_s, and P_low is idempotent in the exact case
    assert np.allclose(exact_low, exact_low.T, atol=1e-9)


def test_fadp_gt_runs_the_approximate_path_for_large_graphs():
    batch = GraphBatch.from_observation(observation(G2))
    exact = make("fadp-gt", batch.x.shape[-1])
    approx = make("fadp-gt", batch.x.shape[-1], dense_limit=5)  # forces Chebyshev
    with torch.no_grad():
        a, _ = exact(batch)
        b, _ = approx(batch)
    assert torch.isfinite(b).all()
    assert (a - b).abs().mean() < 0.2 * a.abs().mean()


@pytest.mark.parametrize("shared_maps", [True, False])
def test_chunked_modulated_attention_equals_the_autograd_formula(shared_maps, monkeypatch):
    """FAGA's eq. 8 kernel (chunked forward, recomputing backward) against eq. 8 written with autograd."""
    from graph_encoders import modulated_attention as ma

    monkeypatch.setattr(ma, "CHUNK_ELEMENTS", 2 * 3 * 7 * 7)  # two graphs per chunk: 5 graphs -> 3 chunks
    g = torch.Generator().manual_seed(0)
    b, h, n, dh, c = 5, 3, 7, 4, 3
    q, k, m = (torch.randn(b, h, n, dh, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    coef = torch.randn(h, c, generator=g, dtype=torch.float64, requires_grad=True)
    maps = torch.randn(1 if shared_maps else b, c, n, n, generator=g, dtype=torch.float64)
    key_mask = torch.ones(b, n, dtype=torch.bool)
    key_mask[1, 5:] = False
    key_mask[4, 2:] = False

    out = ma.modulated_attention(q, k, m, coef, maps, key_mask)
    weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, m, coef))

    modulation = torch.einsum("hc,bcij->bhij", coef, maps)
    logits = (q @ k.transpose(-1, -2) * modulation).masked_fill(~key_mask[:, None, None, :], -1e9)
    expected = torch.softmax(logits, dim=-1) @ m
    expected_grads = torch.autograd.grad((expected * weights).sum(), (q, k, m, coef))

    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)
    # padded keys get no weight: changing their values and keys changes nothing
    m2 = m.detach().clone()
    m2[1, :, 5:] = 100.0
    torch.testing.assert_close(ma.modulated_attention(q, k, m2, coef, maps, key_mask)[1], out[1])


def test_the_names_checked_before_torch_loads_are_the_registry_s():
    import graph_encoders
    from agents.names import ENCODER_NAMES, ENCODER_OPTION_SMALLEST, ENCODER_OPTIONS

    assert list(ENCODER_NAMES) == list_encoders()
    assert ENCODER_OPTIONS == {name: graph_encoders.encoder_options(name) for name in list_encoders()}
    assert ENCODER_OPTION_SMALLEST == graph_encoders.SMALLEST
