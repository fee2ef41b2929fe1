"""Whole models written by other people import unmodified (issue 12, acceptance): a nanoGPT-style
GPT (``torch.arange`` positions, tied ``lm_head``, causal SDPA or the manual ``tril``-buffer
path) and Hugging Face's ``GPT2LMHeadModel`` (``Conv1D``, shape-only causal masks, no-op casts),
built from configs with random weights, float32, eval mode, no download. Each matches torch on
the reference and on OpenCL; a model that cannot import says why in one short error."""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
from nano_gpt import NanoConfig, NanoGPT
from torch import nn

import ncd
import ncd_torch
from ncd_torch import TorchImportError, from_torch

#: the OpenCL half of each check runs where ncd-opencl is installed (the torch session alone
#: has the reference and torch)
OPENCL = importlib.util.find_spec("ncd_opencl") is not None

TOL = 1e-4


class Logits(nn.Module):
    """The wrapper the acceptance allows: call an HF model without a cache, return logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids, use_cache=False).logits


def _nano(flash: bool) -> nn.Module:
    torch.manual_seed(0)
    return NanoGPT(NanoConfig(block_size=32, vocab_size=61, n_layer=2, n_head=4, flash=flash))


def _gpt2(attention: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    config = transformers.GPT2Config(
        n_embd=32, n_layer=2, n_head=4, vocab_size=61, n_positions=32, n_inner=None
    )
    config._attn_implementation = attention
    return Logits(transformers.GPT2LMHeadModel(config)).eval()


MODELS = {
    "nanogpt-sdpa": lambda: _nano(True),
    "nanogpt-tril": lambda: _nano(False),
    "hf-gpt2-sdpa": lambda: _gpt2("sdpa"),
    "hf-gpt2-eager": lambda: _gpt2("eager"),
}


MODELS_BY_ID: dict[int, Callable[[], nn.Module]] = {}  # an import -> how to build a fresh peer


@pytest.fixture(scope="module", params=sorted(MODELS))
def imported(request: pytest.FixtureRequest) -> tuple[nn.Module, ncd_torch.Imported]:
    module = MODELS[request.param]().eval()
    ids = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(2))
    result = from_torch(module, (ids,))
    MODELS_BY_ID[id(result)] = MODELS[request.param]
    return module, result


def _ids(batch: int = 2, seq: int = 16) -> torch.Tensor:
    return torch.randint(0, 61, (batch, seq), generator=torch.Generator().manual_seed(3))


def test_imports_and_matches_the_reference(imported):
    module, result = imported
    ids = _ids()
    want = module(ids).detach().numpy()
    got = ncd.run(result.model, ids.numpy(), params=result.params)
    assert np.abs(got - want).max() < TOL


def test_matches_on_opencl(imported):
    pytest.importorskip("ncd_opencl")
    module, result = imported
    run = ncd.compile(result.model, "opencl")
    for batch, seq in ((2, 16), (5, 29)):  # batch and length stay free: one build runs both
        ids = _ids(batch, seq)
        want = module(ids).detach().numpy()
        got = run(ids.numpy(), params=result.params)
        assert np.abs(got - want).max() < TOL


def test_runs_at_another_batch_on_the_reference(imported):
    module, result = imported
    ids = _ids(3)
    want = module(ids).detach().numpy()
    assert np.abs(ncd.run(result.model, ids.numpy(), params=result.params) - want).max() < TOL


def test_reads_like_ncd_gpt(imported):
    """Positions are the table read in order, masks are causal masks, Conv1D is a Linear: the
    imported model has the axes and ops of ``ncd.nn.gpt``, nothing left of the glue."""
    _, result = imported
    text = result.model.explain()
    sizes = {v.label: v.size for v in result.model.config().bound}
    # the length stays free up to the positional table's (block, sliced to seq)
    assert [v.label for v in result.model.config().free] == ["batch", "seq"]
    assert sizes == {
        "block": 32,
        "d_model": 32,
        "heads": 4,
        "d_head": 8,
        "d_ff": 128,
        "vocab": 61,
        # c_attn stays one Linear onto qkv, sliced into q, k and v
        "qkv": 96,
        "q": 32,
        "k": 32,
        "v": 32,
    }
    assert "causal_mask: [seq seq_k -> seq seq_k]" in text
    assert "wpe: [ -> block d_model]" in text and "wpe_read: [block -> seq]" in text
    assert "constant" not in text and "cast" not in text
    assert "c_attn: [d_model -> qkv]" in text
    assert "c_attn_0: [qkv -> q]" in text
    assert "c_proj: [heads d_head -> d_model]" in text
    # the tied table's rows read by a gather
    assert "wte: [(), vocab -> ()] over (batch seq d_model)" in text
    names = set(result.torch_names.values())
    assert any(n.endswith("wpe.weight") for n in names)  # the whole table, as torch's


def test_exported_back_to_torch_matches(imported):
    module, result = imported
    back = ncd_torch.to_module(result.model, params=result.params)
    for batch, seq in ((2, 16), (3, 29)):
        ids = _ids(batch, seq)
        got = back(ids).detach().numpy()
        assert np.abs(got - module(ids).detach().numpy()).max() < TOL


def test_the_original_checkpoint_loads_as_it_is(imported):
    """``to_module(imported)`` takes the original module's ``state_dict`` (its names, its
    shapes: Conv1D's in x out, the whole positional table, both names of the tied weight,
    the tril buffers) and converts it; ``params_from`` gives the same as ncd parameters."""
    module, result = imported
    torch.manual_seed(9)
    learned = {k for k, _ in module.named_parameters(remove_duplicate=False)}
    state = {k: torch.randn_like(v) * 0.1 if k in learned else v for k, v in _state(module)}
    if "transformer.wte.weight" in state:  # keep nanoGPT's tie: one tensor under two names
        state["transformer.wte.weight"] = state["lm_head.weight"]
    back = ncd_torch.to_module(result)
    back.load_state_dict(state)
    reloaded = MODELS_BY_ID[id(result)]()
    reloaded.load_state_dict(state)
    ids = _ids(3)
    want = reloaded.eval()(ids).detach().numpy()
    assert np.abs(back(ids).detach().numpy() - want).max() < TOL
    params = result.params_from(state)
    assert np.abs(ncd.run(result.model, ids.numpy(), params=params) - want).max() < TOL
    back.load_state_dict(ncd_torch.to_module(result).state_dict())  # ncd's own form still loads
    assert np.abs(back(ids).detach().numpy() - module(ids).detach().numpy()).max() < TOL


def _state(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(k, v.detach().clone()) for k, v in module.state_dict().items()]


def test_hf_bert_without_a_padding_mask_imports():
    """Token types (a registered buffer of zeros: one table row for every position), absolute
    positions, ``embeddings += ...`` in place, post-norm blocks, bidirectional SDPA."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=61,
        max_position_embeddings=32,
    )

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = transformers.BertModel(config, add_pooling_layer=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=ids).last_hidden_state

    module = Hidden().eval()
    result = from_torch(module, (_ids(),))
    for batch in (2, 3):
        ids = _ids(batch)
        got = ncd.run(result.model, ids.numpy(), params=result.params)
        assert np.abs(got - module(ids).detach().numpy()).max() < TOL
    back = ncd_torch.to_module(result)  # a submodule named `self` shadows nothing
    assert "self_ = self.self(" in back.m.encoder.layer.get_submodule("0").attention.code
    back.load_state_dict(module.state_dict())
    ids = _ids(3)
    assert np.abs(back(ids).detach().numpy() - module(ids).detach().numpy()).max() < TOL
    names = result.torch_names
    assert names["m.embeddings.token_type_embeddings.weight"].endswith("weight[0]")
    assert "causal_mask" not in result.model.explain()


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_hf_bert_with_a_padding_mask_imports(impl: str) -> None:
    """The attention mask input becomes an additive mask of the scores: ``ops.cast`` of the
    int64 input, then ``(1 - m) * finfo.min`` (eager) or ``ops.where(1 - m, finfo.min, 1 - m)``
    (sdpa's masked_fill); padding keys get no weight on the reference and on OpenCL."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=61,
        max_position_embeddings=32,
        attn_implementation=impl,
    )

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = transformers.BertModel(config, add_pooling_layer=False)

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=ids, attention_mask=mask).last_hidden_state

    def mask_of(batch: int) -> torch.Tensor:
        mask = torch.ones(batch, 16, dtype=torch.long)
        mask[0, 9:] = 0
        mask[-1, 13:] = 0
        return mask

    module = Hidden().eval()
    result = from_torch(module, (_ids(), mask_of(2)))
    compiled = ncd.compile(result.model, "opencl") if OPENCL else None
    for batch in (2, 3):  # the batch stays free; the length is the positional table's
        ids, mask = _ids(batch), mask_of(batch)
        with torch.no_grad():
            want = module(ids, mask).numpy()
        args = (ids.numpy(), mask.numpy())
        assert np.abs(ncd.run(result.model, *args, params=result.params) - want).max() < TOL
        if compiled is not None:
            assert np.abs(compiled(*args, params=result.params) - want).max() < TOL
    assert "cast float32" in result.model.explain()  # eager BERT multiplies, sdpa selects
    back = ncd_torch.to_module(result)
    back.load_state_dict(module.state_dict())
    with torch.no_grad():
        again = back(_ids(3), mask_of(3)).numpy()
        want = module(_ids(3), mask_of(3)).numpy()
    assert np.abs(again - want).max() < TOL


def test_a_returned_cache_names_use_cache_false():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=61)

    class WithCache(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = transformers.GPT2LMHeadModel(config)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=ids).logits  # use_cache left on

    with pytest.raises(TorchImportError, match="call the model with use_cache=False"):
        from_torch(WithCache().eval(), (_ids(),))


def test_gpt2_conv1d_weights_are_transposed_linears():
    """HF GPT-2's Conv1D (in x out) is a Linear; its packed c_attn stays one parameter."""
    pytest.importorskip("transformers")
    module = _gpt2("sdpa")
    result = from_torch(module, (_ids(),))
    state = module.state_dict()
    w = result.params["m.transformer.h.0.attn.c_attn.weight"]  # (qkv, d_model)
    assert result.torch_names["m.transformer.h.0.attn.c_attn.weight"] == (
        "m.transformer.h.0.attn.c_attn.weight.T"
    )
    conv = state["m.transformer.h.0.attn.c_attn.weight"].numpy()  # (in, 3 * out)
    np.testing.assert_array_equal(w, conv.T)
    fc = result.params["m.transformer.h.1.mlp.c_fc.weight"]
    np.testing.assert_array_equal(fc, state["m.transformer.h.1.mlp.c_fc.weight"].numpy().T)


def test_shorter_sequence_reads_the_first_positions():
    module = _nano(False).eval()
    ids = _ids(3, 5)
    result = from_torch(module, (ids,))
    got = ncd.run(result.model, ids.numpy(), params=result.params)
    assert np.abs(got - module(ids).detach().numpy()).max() < TOL
    table = module.transformer.wpe.weight.detach().numpy()
    np.testing.assert_array_equal(result.params["transformer.wpe.weight"], table)
    longer = _ids(2, 32)  # and the same import runs up to the table's length, not past it
    got = ncd.run(result.model, longer.numpy(), params=result.params)
    assert np.abs(got - module(longer).detach().numpy()).max() < TOL
    with pytest.raises(ncd.NcdError, match=r"\[0:33\] of block.* ends past its size 32"):
        ncd.run(result.model, _ids(2, 33).numpy(), params=result.params)


@pytest.mark.parametrize("name", ["nanogpt-sdpa", "hf-gpt2-sdpa"])
def test_parameter_count_equals_the_unique_torch_parameters(name: str) -> None:
    """The tied token table is one parameter (its embedding and unembedding read the same
    array) and GPT-2's packed c_attn one: as many parameters as torch has, gradients too."""
    module = MODELS[name]().eval()
    ids = _ids()
    result = from_torch(module, (ids,))
    assert len(result.params) == len(list(module.parameters()))
    tied = [k for k in result.params if k.endswith("wte.weight")]
    assert len(tied) == 1
    # both readers' gradients arrive in the one parameter's: ncd.grad matches autograd
    targets = torch.randint(0, 61, ids.shape, generator=torch.Generator().manual_seed(5))
    loss_model = result.model.bind(seq=16) >> ncd.nn.cross_entropy()  # grad binds the length
    names = {k.split(".", 1)[1]: k for k in ncd.init(loss_model, seed=0)}  # under the model's scope
    params = {names[k]: v for k, v in result.params.items()}
    _, grads = ncd.run(ncd.grad(loss_model), ids.numpy(), targets.numpy(), params=params)
    logits = module(ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 61), targets.reshape(-1))
    loss.backward()
    table = dict(module.named_parameters(remove_duplicate=False))[result.torch_names[tied[0]]]
    assert table.grad is not None
    assert np.abs(grads[names[tied[0]]] - table.grad.numpy()).max() < 1e-5


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(x, 1))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.export warns about an LSTM's flat weights; not what these tests are about."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.emb(ids))
        return self.head(out)


def test_a_conv_net_with_batch_norm_imports_and_matches_torch():
    # convolution, eval-mode batch norm and pooling import (issue 15)
    torch.manual_seed(0)
    module = ConvNet().eval()
    with torch.no_grad():
        for bn in (module.bn1, module.bn2):  # statistics other than the initial ones
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_()
            bn.bias.normal_()
    x = torch.randn(2, 3, 14, 14)
    imported = from_torch(module, (x,))
    model, params = imported
    assert {"bn1.running_mean", "bn1.running_var", "conv2.weight"} <= set(params)
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(ncd.run(model, x.numpy(), params=params), want, atol=1e-5)
    back = imported.to_module()
    back.load_state_dict(module.state_dict())  # buffers included, as they are
    with torch.no_grad():
        np.testing.assert_allclose(back(x).numpy(), want, atol=1e-5)


class TransposedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.ConvTranspose2d(3, 4, 3), nn.ConvTranspose2d(4, 4, 1)
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(torch.relu(self.conv1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def test_a_conv_net_gives_one_short_error_naming_every_unsupported_module():
    with pytest.raises(TorchImportError) as info:
        from_torch(TransposedNet().eval(), (torch.randn(2, 3, 5, 5),))
    message = str(info.value)
    assert len(message.splitlines()) < 20
    assert isinstance(info.value, ncd.NcdError)
    assert "conv1, conv2 (ConvTranspose2d)" in message and "pool (AdaptiveMaxPool2d)" in message
    assert "test_real_models.py:" in message
    assert "torch/nn/modules/conv.py:" in message  # the frame inside torch's own module
    assert "2-d and 3-d transposed ones do not yet" in message
    assert "adaptive max pooling and other sizes are not supported yet" in message
    assert "supported_ops()" in message and "aten.linear" not in message
    ops = {p.op for p in info.value.problems}
    assert ops == {"aten.conv_transpose2d", "aten.adaptive_max_pool2d"}
    assert {p.site.path for p in info.value.problems} == {"conv1", "conv2", "pool"}


def test_training_mode_batch_norm_imports_with_batch_statistics():
    # was refused; batch statistics import since issue 15's training form
    torch.manual_seed(3)
    module = ConvNet().train()
    x = torch.randn(2, 3, 14, 14)
    model, params = from_torch(module, (x,))
    want = module(x).detach().numpy()
    np.testing.assert_allclose(ncd.run(model, x.numpy(), params=params), want, atol=1e-5)


def test_an_lstm_tagger_imports_and_matches_torch():
    # recurrent layers import as scans (issue 15)
    torch.manual_seed(1)
    module = Tagger().eval()
    ids = torch.randint(0, 20, (2, 5))
    with _quiet():
        model, params = from_torch(module, (ids,))
    with torch.no_grad():
        want = module(ids).numpy()
    np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-5)


def test_an_lstm_fed_a_constant_state_imports_and_one_of_several_values_is_refused():
    class Seeded(Tagger):
        def __init__(self, varied: bool) -> None:
            super().__init__()
            self.varied = varied

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h0 = torch.ones(1, ids.shape[0], 16)
            if self.varied:
                h0 = torch.arange(16.0).expand(1, ids.shape[0], 16)
            out, _ = self.lstm(self.emb(ids), (h0, 0.5 * h0))
            return self.head(out)

    torch.manual_seed(2)
    ids = torch.randint(0, 20, (2, 5))
    with _quiet():
        module = Seeded(False).eval()
        model, params = from_torch(module, (ids,))
    with torch.no_grad():
        want = module(ids).numpy()
    np.testing.assert_allclose(ncd.run(model, ids.numpy(), params=params), want, atol=1e-5)
    with _quiet(), pytest.raises(TorchImportError) as info:
        from_torch(Seeded(True).eval(), (ids,))
    message = str(info.value)
    assert len(message.splitlines()) <= 5
    assert "lstm (LSTM)" in message and "several values" in message
    assert [p.op for p in info.value.problems] == ["aten.lstm"]


def test_every_problem_is_listed_not_just_the_first():
    class Two(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.cummax(x, -1).values
            z = torch.sort(x, -1).values
            return y + z + torch.einsum("...d->...", x).unsqueeze(-1)

    with pytest.raises(TorchImportError) as info:
        from_torch(Two(), (torch.randn(2, 3),))
    ops = [p.op for p in info.value.problems]
    assert ops == ["aten.cummax", "aten.sort", "aten.einsum"]
    assert "without '...'" in info.value.problems[-1].detail
    assert "aten.einsum (the equation" in str(info.value)


def test_an_output_of_constants_alone_is_named():
    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("b", torch.arange(3.0))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + 1, self.b * 2

    with pytest.raises(TorchImportError, match="returns only those") as info:
        from_torch(Both(), (torch.randn(3),))
    assert [(p.op, p.detail) for p in info.value.problems] == [
        ("output", "an output computed from constants alone")
    ]


class HandNorm(nn.Module):
    """LayerNorm written out with keepdim reductions, as people write it."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(d)), nn.Parameter(torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        gate = torch.sigmoid(x.amax(1)).unsqueeze(1)  # (b, d) -> (b, 1, d)
        return self.weight * (x - mu) / torch.sqrt(var + 1e-5) * gate + self.bias


def test_keepdim_and_unsqueeze_are_broadcast_dims():
    torch.manual_seed(7)
    module = HandNorm(8)
    model, params = from_torch(module, (torch.randn(2, 5, 8),))
    for shape in ((2, 5, 8), (3, 7, 8)):
        x = torch.randn(*shape)
        got = ncd.run(model, x.numpy(), params=params)
        np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_hf_llama_rmsnorm_imports():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    module = LlamaRMSNorm(8, eps=1e-6)
    with torch.no_grad():
        module.weight.normal_()
    x = torch.randn(2, 5, 8)
    model, params = from_torch(module, (x,))  # .to(float32), pow, mean(keepdim), rsqrt
    got = ncd.run(model, x.numpy(), params=params)
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


class Squeezed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.sum(-1, keepdim=True), dim=1)


def test_a_broadcast_dim_read_by_an_op_that_needs_an_axis_is_refused():
    with pytest.raises(TorchImportError, match="size-1 broadcast dim"):
        from_torch(Squeezed(), (torch.randn(2, 5, 8),))


def test_supported_ops_lists_the_rule_table():
    ops = ncd_torch.supported_ops()
    assert ops == sorted(ops)
    for op in ("aten.linear", "aten.addmm", "aten.embedding", "aten.where", "aten.to"):
        assert op in ops


class Glue(nn.Module):
    """Shape-only glue of the kinds HF models build: ones/cumsum positions, a full() constant,
    a no-op cast, an expanded buffer mask compared with le."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Embedding(10, 6)
        self.register_buffer("limit", torch.tensor(7))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        positions = torch.cumsum(torch.ones(b, t, dtype=torch.long), dim=1) - 1  # OPT's way
        h = x.to(torch.float32) + self.pos(positions)
        scores = h @ h.transpose(1, 2) * torch.full([], 0.5)
        q = torch.arange(t).view(t, 1)
        k = torch.arange(t).view(1, t).expand(t, t)
        visible = (k <= q).unsqueeze(0) & (q < self.limit)
        scores = torch.where(visible, scores, torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1) @ h


def test_shape_only_glue_is_evaluated_at_import():
    x = torch.randn(2, 5, 6)
    module = Glue().eval()
    result = from_torch(module, (x,))
    got = ncd.run(result.model, x.numpy(), params=result.params)
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    text = result.model.explain()
    assert "causal_mask" in text and "pos: [ -> block d_model]" in text
    assert set(result.params) == {"pos.weight"}


def test_imported_gpt2_draws_and_prices():
    pytest.importorskip("transformers")
    ncd_diagram = pytest.importorskip("ncd_diagram")
    ncd_perf = pytest.importorskip("ncd_perf")
    result = from_torch(_gpt2("sdpa"), (_ids(),))
    svg = ncd_diagram.draw(result.model, "svg")  # the native drawing
    assert isinstance(svg, str) and svg.startswith("<svg") and "attention" in svg
    priced = ncd_perf.cost(result.model.bind(batch=2))
    assert priced.kernels and priced.flops
