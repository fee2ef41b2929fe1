"""torch.compile runs the exported module, and gradients train it (kept few and small: compiling
is slow on a shared 2-core machine)."""

import numpy as np
import torch

import ncd
from ncd import nn
from ncd_torch import state_dict, to_module


def _tiny_gpt():
    return nn.gpt(layers=1).bind(seq=7, d_model=8, heads=2, d_head=4, d_ff=13, vocab=11)


def test_torch_compile_agrees_with_the_reference():
    model = _tiny_gpt()
    params = ncd.init(model, seed=0)
    tokens = np.random.default_rng(0).integers(0, 11, 7)
    want = ncd.run(model, tokens, params=params)
    module = to_module(model, params=params)
    compiled = torch.compile(module, backend="inductor")
    with torch.no_grad():
        got = compiled(torch.from_numpy(tokens)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_compiled_backend_option():
    model = nn.attention(causal=True).bind(q=7, x=7, d=5, v=3)
    exe = ncd.compile(model, "torch", compile=True)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in [(7, 5), (7, 5), (7, 3)])
    np.testing.assert_allclose(exe(q, k, v), ncd.run(model, q, k, v), rtol=1e-4, atol=1e-5)


def test_a_few_optimiser_steps_lower_the_loss():
    torch.manual_seed(0)
    model = _tiny_gpt()
    module = to_module(model)
    module.load_state_dict(state_dict(ncd.init(model, seed=0)))
    module.train()
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 11, 8))
    inputs, targets = tokens[:-1], tokens[1:]
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = torch.nn.functional.cross_entropy(module(inputs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.grad is not None for p in module.parameters())
    assert losses[-1] < 0.5 * losses[0], losses


def test_the_exported_joint_graph_trains_as_the_reference_does():
    # ncd.training.fit on target "torch": the loss and gradients from the exported ncd.grad
    # graph, the AdamW update exported too; same init and batches as the reference
    from ncd import training

    corpus = training.python_docs_corpus()
    model = training.char_gpt(len(corpus.vocab), layers=1, d_model=8, heads=2, seq=13, batch=3)
    params = ncd.init(model, seed=3)
    runs = [training.fit(model, corpus, params, target=t, steps=6) for t in ("reference", "torch")]
    assert training.agreement(runs)["torch"] < 1e-4
    assert runs[1].train[-1] < runs[1].train[0]
