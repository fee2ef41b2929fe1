"""Recurrent layers (issue 15): ``nn.rnn``/``nn.gru``/``nn.lstm`` against torch's modules
(layers, bidirectional, batch_first, no bias, relu) loading their ``state_dict`` as it is, at
awkward lengths and widths, on the reference, OpenCL and the torch export; their gradients
against autograd; and ``from_torch`` of LSTM and GRU language models (the issue's acceptance:
imported, run within 1e-4 on the reference and OpenCL, exported back loading the original
checkpoint, drawn and priced), with the refusals of what does not import."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn as tnn

import ncd
import ncd_torch
from ncd import nn

OPENCL = importlib.util.find_spec("ncd_opencl") is not None
KINDS = {"lstm": tnn.LSTM, "gru": tnn.GRU, "rnn": tnn.RNN}


def _ours(kind: str, d_in: int, hidden: int, n: int, batch: int | None, **kw: Any) -> ncd.Term:
    make = getattr(nn, kind)
    b = None if batch is None else ncd.Axis("batch", size=batch)
    return make(d_in, hidden, seq=n, batch=b, label="", **kw)  # type: ignore[no-any-return]


CASES = [
    # kind, d_in, hidden, seq, batch, layers, bidirectional, batch_first, bias, extra
    ("lstm", 3, 5, 7, 2, 1, False, False, True, {}),
    ("lstm", 1, 13, 13, 1, 2, True, True, True, {}),
    ("lstm", 7, 1, 1, None, 2, False, False, False, {}),
    ("gru", 3, 7, 13, 2, 2, True, False, True, {}),
    ("gru", 5, 3, 1, 3, 1, False, True, False, {}),
    ("rnn", 4, 6, 7, 2, 2, False, False, True, {}),
    ("rnn", 2, 3, 13, None, 1, True, False, True, {"nonlinearity": "relu"}),
]


@pytest.mark.parametrize(
    ("kind", "d", "h", "n", "batch", "layers", "bi", "bf", "bias", "kw"), CASES
)
def test_each_layer_is_torchs_module_with_its_checkpoint(
    kind: str,
    d: int,
    h: int,
    n: int,
    batch: int | None,
    layers: int,
    bi: bool,
    bf: bool,
    bias: bool,
    kw: dict[str, Any],
) -> None:
    torch.manual_seed(n * 31 + h)
    module = KINDS[kind](d, h, num_layers=layers, bidirectional=bi, batch_first=bf, bias=bias, **kw)
    module = module.double().eval()
    shape = (n, d) if batch is None else ((batch, n, d) if bf else (n, batch, d))
    x = torch.randn(*shape, dtype=torch.float64)
    x.view(-1)[0] = 4.0  # large enough to saturate a gate
    model = _ours(
        kind, d, h, n, batch, layers=layers, bidirectional=bi, batch_first=bf, bias=bias, **kw
    )
    params = ncd_torch.load_state_dict(model, module.state_dict())
    assert sorted(params) == sorted(module.state_dict())
    with torch.no_grad():
        want = module(x)[0].numpy()
    got = ncd.run(model, x.numpy(), params=params)
    np.testing.assert_allclose(got, want, atol=1e-12)
    back = ncd_torch.to_module(model).double()
    back.load_state_dict(ncd_torch.state_dict(params))
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-12)
    if OPENCL:
        f32 = {k: v.astype(np.float32) for k, v in params.items()}
        cl = ncd.compile(model, "opencl")(x.numpy().astype(np.float32), params=f32)
        np.testing.assert_allclose(cl, want, atol=1e-4, rtol=1e-4)


def test_non_finite_inputs_propagate_as_in_torch() -> None:
    torch.manual_seed(1)
    module = tnn.LSTM(3, 4).double().eval()
    x = torch.randn(7, 2, 3, dtype=torch.float64)
    x[2, 0, 1] = float("nan")
    x[4, 1, 0] = float("inf")
    model = _ours("lstm", 3, 4, 7, 2)
    params = ncd_torch.load_state_dict(model, module.state_dict())
    with torch.no_grad():
        want = module(x)[0].numpy()
    got = ncd.run(model, x.numpy(), params=params)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], atol=1e-12)


def test_gradients_match_autograd() -> None:
    """ncd.grad of a GRU's summed output, by parameter, against torch's backward."""
    torch.manual_seed(2)
    module = tnn.GRU(3, 5, num_layers=2).double()
    x = torch.randn(7, 2, 3, dtype=torch.float64)
    model = _ours("gru", 3, 5, 7, 2, layers=2) >> ncd.ops.sum(["seq", "batch", "hidden"])
    params = ncd_torch.load_state_dict(model, module.state_dict())
    module(x)[0].sum().backward()
    _, grads = ncd.run(ncd.grad(model), x.numpy(), params=params)
    for name, p in module.named_parameters():
        assert p.grad is not None
        np.testing.assert_allclose(
            grads[name].reshape(p.shape), p.grad.numpy(), atol=1e-10, err_msg=name
        )


class LanguageModel(tnn.Module):
    """The PyTorch word-language-model example's shape: embedding, recurrent layers, head."""

    def __init__(self, cell: str, vocab: int, d: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.encoder = tnn.Embedding(vocab, d)
        self.rnn = KINDS[cell](d, hidden, num_layers=layers)
        self.decoder = tnn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.encoder(ids))
        return self.decoder(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_recurrent_language_model_imports_runs_exports_draws_and_is_priced(cell: str) -> None:
    torch.manual_seed(7)
    module = LanguageModel(cell, 29, 6, 13, 2).eval()
    ids = torch.randint(0, 29, (13, 3))
    imported = ncd_torch.from_torch(module, (ids,))
    model, params = imported
    assert sorted(params) == sorted(module.state_dict())
    with torch.no_grad():
        want = module(ids).numpy()
    np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-5)
    back = imported.to_module()
    back.load_state_dict(module.state_dict())  # the original checkpoint, as it is
    with torch.no_grad():
        np.testing.assert_allclose(back(ids).numpy(), want, atol=1e-5)
    if OPENCL:
        got = ncd.compile(model, "opencl")(ids.numpy(), params=params)
        np.testing.assert_allclose(got, want, atol=1e-4)
    if importlib.util.find_spec("ncd_diagram"):
        import ncd_diagram

        assert "<svg" in ncd_diagram.diagram(model).to_svg()
    if importlib.util.find_spec("ncd_perf"):
        import ncd_perf

        priced = ncd_perf.cost(model.bind(batch=3), "h100")
        assert float(priced.flops["matrix"]) > 0


def test_rnn_lm_is_the_torch_language_model() -> None:
    torch.manual_seed(8)
    module = LanguageModel("lstm", 11, 4, 7, 2).double().eval()
    model = nn.rnn_lm(11, 4, 7, layers=2, seq=13, label="")
    state = {
        k.replace("encoder", "embed").replace("decoder", "head"): v
        for k, v in module.state_dict().items()
    }
    params = ncd_torch.load_state_dict(model, state)
    ids = torch.randint(0, 11, (13,))
    with torch.no_grad():
        want = module(ids[:, None])[:, 0].numpy()
    np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-12)


class _States(tnn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.rnn = tnn.LSTM(3, 4, proj_size=2 if how == "proj" else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "h0":
            h0 = torch.arange(4.0).expand(1, 2, 4)
            return self.rnn(x, (h0, h0))[0]  # type: ignore[no-any-return]
        return self.rnn(x)[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("h0", "a constant tensor of several values"),
        ("proj", "proj_size"),
    ],
)
def test_what_does_not_import_is_named(how: str, words: str) -> None:
    # a constant initial state of several values (one value throughout, or a model value,
    # imports)
    with pytest.raises(ncd_torch.TorchImportError, match=words):
        ncd_torch.from_torch(_States(how).eval(), (torch.randn(7, 2, 3),))


def test_bad_layers_are_typed_errors() -> None:
    with pytest.raises(ncd.DefinitionError, match="layers must be an int"):
        nn.lstm(3, 4, layers=0)
    with pytest.raises(ncd.DefinitionError, match="needs the batch axis"):
        nn.gru(3, 4, batch_first=True)
    with pytest.raises(ncd.DefinitionError, match="nonlinearity must be"):
        nn.rnn(3, 4, nonlinearity="gelu")
    with pytest.raises(ncd.SizeError, match="needs that size"):
        nn.lstm(3, 4)  # the sequence length is not known


class Stateful(tnn.Module):
    """A recurrent layer fed its initial states and returning its final ones, as the PyTorch
    word-language-model example carries them from batch to batch."""

    def __init__(self, cell: str, layers: int, both: bool, first: bool) -> None:
        super().__init__()
        self.cell = cell
        self.rnn = KINDS[cell](5, 7, num_layers=layers, bidirectional=both, batch_first=first)

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> Any:
        if self.cell == "lstm":
            y, (h, c) = self.rnn(x, (state[0], state[1]) if state else None)
            return y, h, c
        y, h = self.rnn(x, state[0] if state else None)
        return y, h


@pytest.mark.parametrize(
    ("cell", "layers", "both", "first", "given"),
    [
        ("lstm", 2, False, False, True),
        ("lstm", 1, True, True, True),
        ("gru", 2, True, False, True),
        ("rnn", 1, False, True, True),
        ("lstm", 2, True, False, False),
        ("gru", 1, False, False, False),
    ],
)
def test_initial_and_final_states_import(
    cell: str, layers: int, both: bool, first: bool, given: bool
) -> None:
    """``(h_0, c_0)`` fed in (or zeros) and ``(h_n, c_n)`` read, in torch's layout, at
    another batch than the capture's (the batch stays free; the length is unrolled) on the
    reference, OpenCL and the export; a NaN in one batch row of the initial state stays in
    that row, as torch's."""
    torch.manual_seed(9)
    module = Stateful(cell, layers, both, first).eval()
    stack = layers * (2 if both else 1)

    def inputs(batch: int, n: int) -> tuple[torch.Tensor, ...]:
        x = torch.randn(*((batch, n) if first else (n, batch)), 5)
        states = [torch.randn(stack, batch, 7) for _ in range(2 if cell == "lstm" else 1)]
        return (x, *states) if given else (x,)

    imported = ncd_torch.from_torch(module, inputs(2, 7))
    model, params = imported
    assert [v.label for v in model.config().free] == ["batch"]
    xs = inputs(3, 7)
    if given:
        xs[1][0, 1, 3] = float("nan")
    with torch.no_grad():
        want = [t.numpy() for t in module(*xs)]
    got = ncd.run(model, *(x.numpy() for x in xs), params=params)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-5)
    back = imported.to_module()
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        for a, b in zip(back(*xs), want, strict=True):
            np.testing.assert_allclose(a.numpy(), b, atol=1e-5)
    if OPENCL:
        outs = ncd.compile(model, "opencl")(*(x.numpy() for x in xs), params=params)
        for a, b in zip(outs, want, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)
