"""Standard blocks as definitions: attention (softmax and spherical), multi-head attention,
MLP, norms, the pre-norm transformer block and a GPT; the Llama family (SwiGLU, grouped-query
attention with rotary embeddings, ``llama``) lives in ``ncd._llama``.

Every size argument takes an ``Axis`` (shared with the caller), an int (a fixed size) or a
name (a fresh free axis). Blocks that share axes, like the layers of a GPT, are built from the
same ``Axis`` objects, so ``config()`` lists each size once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ncd import ops
from ncd._lower import Builder, Hole, Ref
from ncd._term import Term
from ncd._trace import Tensor, trace
from ncd.axis import ArrayType, Axis, axis_arg, show
from ncd.dtypes import float32
from ncd.errors import DefinitionError
from ncd.op import pinned_format

__all__ = [
    "attention",
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "bert",
    "bert_attention",
    "bert_layer",
    "cnn",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "cross_entropy",
    "gpt",
    "gqa_attention",
    "gru",
    "group_norm",
    "instance_norm",
    "kl_div",
    "l1",
    "layernorm",
    "llama",
    "llama_block",
    "lstm",
    "max_pool1d",
    "max_pool2d",
    "mlp",
    "resnet_block",
    "rnn",
    "rnn_lm",
    "mse",
    "multihead_attention",
    "nll",
    "rmsnorm",
    "spherical_attention",
    "swiglu",
    "transformer_block",
]

AxisArg = Axis | int | str | None


_ax = axis_arg  # a builder argument as an axis (ncd.axis.axis_arg)


#: The most layers ``gpt`` builds: each is traced eagerly, so a typo like 10**9 would hang.
MAX_LAYERS = 4096


def _count(what: str, value: object, low: int, high: int = MAX_LAYERS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DefinitionError(
            f"{what} must be an int in [{low}, {high}], got {show(value)}. Fix: "
            "pass an int in that range."
        )
    return value


def _activation(value: object) -> str:
    from ncd.ops import UNARY_FNS

    if value not in UNARY_FNS:
        raise DefinitionError(
            f"unknown activation {show(value)}. Fix: use one of {', '.join(UNARY_FNS)}."
        )
    return str(value)


def attention(
    q: AxisArg = "q",
    x: AxisArg = "x",
    d: AxisArg = "d",
    v: AxisArg = "v",
    *,
    scale: bool = True,
    causal: bool = False,
    label: str = "attention",
) -> Term:
    """``softmax(Q K^T / sqrt(d)) V`` in one line: three inputs ``Q[q d], K[x d], V[x v]``."""
    qa, xa, da, va = _ax("q", q), _ax("x", x), _ax("d", d), _ax("v", v)
    t = ops.einsum("q d, x d -> q x", q=qa, x=xa, d=da)
    if scale:
        t = t >> ops.scale(da, -0.5)
    if causal:
        t = t >> ops.causal_mask(qa, xa)
    t = t >> ops.softmax(xa) >> ops.einsum("q x, x v -> q v", q=qa, x=xa, v=va)
    return t.named("attention", label)


def spherical_attention(
    q: AxisArg = "q",
    x: AxisArg = "x",
    d: AxisArg = "d",
    v: AxisArg = "v",
    *,
    causal: bool = False,
    label: str = "attention",
) -> Term:
    """Attention with the L2 normaliser in place of softmax (no exponentials; scale-free)."""
    qa, xa, da, va = _ax("q", q), _ax("x", x), _ax("d", d), _ax("v", v)
    t = ops.einsum("q d, x d -> q x", q=qa, x=xa, d=da)
    if causal:
        t = t >> ops.causal_mask(qa, xa, fill="0")
    t = t >> ops.l2norm(xa) >> ops.einsum("q x, x v -> q v", q=qa, x=xa, v=va)
    return t.named("spherical_attention", label)


def layernorm(axis: AxisArg = "d_model", *, eps: float = 1e-5, label: str = "ln") -> Term:
    """LayerNorm over one axis with learned scale and shift."""
    return ops.layernorm(_ax("d_model", axis), eps=eps, name="").named("layernorm", label)


def rmsnorm(axis: AxisArg = "d_model", *, eps: float = 1e-6, label: str = "norm") -> Term:
    """RMSNorm over one axis with a learned scale."""
    return ops.rmsnorm(_ax("d_model", axis), eps=eps, name="").named("rmsnorm", label)


def mlp(
    d_model: AxisArg = "d_model",
    d_ff: AxisArg = "d_ff",
    *,
    activation: str = "gelu",
    label: str = "mlp",
) -> Term:
    """``proj(act(fc(x)))`` from ``d_model`` to ``d_ff`` and back."""
    dm, ff = _ax("d_model", d_model), _ax("d_ff", d_ff)
    act = ops.unary(_activation(activation))
    body = ops.linear(dm, ff, name="fc") >> act >> ops.linear(ff, dm, name="proj")
    return body.named("mlp", label)


def multihead_attention(
    seq: AxisArg = "seq",
    d_model: AxisArg = "d_model",
    heads: AxisArg = "heads",
    d_head: AxisArg = "d_head",
    *,
    seq_k: AxisArg = "seq_k",
    causal: bool = True,
    spherical: bool = False,
    label: str = "attn",
) -> Term:
    """Self-attention with ``heads`` heads: q/k/v projections, attention lifted over heads, and
    an output projection. Keys run over ``seq_k``, a renamed copy of ``seq`` (same size)."""
    s, dm, h, dh = (
        _ax("seq", seq),
        _ax("d_model", d_model),
        _ax("heads", heads),
        _ax("d_head", d_head),
    )
    key = _ax("seq_k", seq_k)
    core = (
        spherical_attention(s, key, dh, dh, causal=causal)
        if spherical
        else attention(s, key, dh, dh, causal=causal)
    )

    @trace(inputs=[ArrayType((s, dm))], name="multihead_attention", label=label)
    def mha(x: Tensor) -> Tensor:
        q = ops.linear(dm, (h, dh), name="q")(x)
        k = ops.rename(s, key)(ops.linear(dm, (h, dh), name="k")(x))
        v = ops.rename(s, key)(ops.linear(dm, (h, dh), name="v")(x))
        return ops.linear((h, dh), dm, name="o")(core(q, k, v))  # type: ignore[no-any-return]

    return mha


def transformer_block(
    seq: AxisArg = "seq",
    d_model: AxisArg = "d_model",
    heads: AxisArg = "heads",
    d_head: AxisArg = "d_head",
    d_ff: AxisArg = "d_ff",
    *,
    seq_k: AxisArg = "seq_k",
    causal: bool = True,
    spherical: bool = False,
    dropout: float = 0.0,
    label: str = "block",
) -> Term:
    """Pre-norm block: ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``; ``dropout``: GPT-2's
    residual dropout on each branch before it is added (``ops.dropout``: identity at
    inference)."""
    s, dm = _ax("seq", seq), _ax("d_model", d_model)
    h, dh, ff = _ax("heads", heads), _ax("d_head", d_head), _ax("d_ff", d_ff)
    attn = multihead_attention(s, dm, h, dh, seq_k=seq_k, causal=causal, spherical=spherical)
    ffn = mlp(dm, ff)
    ln_1, ln_2 = layernorm(dm, label="ln_1"), layernorm(dm, label="ln_2")
    drop = _dropout(dropout, "transformer_block")

    @trace(inputs=[ArrayType((s, dm))], name="transformer_block", label=label)
    def block(x: Tensor) -> Tensor:
        x = x + drop(attn(ln_1(x)))
        return x + drop(ffn(ln_2(x)))

    return block


def _dropout(p: object, what: str) -> Callable[[Tensor], Tensor]:
    """``ops.dropout(p)`` as a function of a tensor, or the identity for ``p == 0``."""
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p < 1.0:
        raise DefinitionError(
            f"{what}: dropout must be a probability in [0, 1), got {show(p)}. Fix: pass e.g. "
            "dropout=0.1 (0 for none)."
        )
    if p == 0:
        return lambda t: t
    term = ops.dropout(float(p))
    return lambda t: term(t)


def gpt(
    layers: int = 2,
    *,
    seq: AxisArg = "seq",
    d_model: AxisArg = "d_model",
    heads: AxisArg = "heads",
    d_head: AxisArg = "d_head",
    d_ff: AxisArg = "d_ff",
    vocab: AxisArg = "vocab",
    spherical: bool = False,
    block_size: AxisArg | bool = False,
    dropout: float = 0.0,
) -> Term:
    """A GPT: token and learned positional embeddings, ``layers`` causal blocks, a final
    LayerNorm and an untied unembedding. Input: token ids ``[seq]``; output: logits
    ``[seq vocab]``. ``block_size`` (an axis, a size or True for a free ``block``): the
    positional table is ``[block d_model]`` and the first ``|seq|`` rows are read, so
    ``seq`` stays free up to it (nanoGPT's ``block_size``); otherwise the table is
    ``[seq d_model]``. ``dropout``: GPT-2's embedding and residual dropout (``ops.dropout``:
    identity at inference, random in training mode and in the torch export's ``train()``;
    not on the attention probabilities)."""
    _count("gpt: layers", layers, 0)
    s, dm, h = _ax("seq", seq), _ax("d_model", d_model), _ax("heads", heads)
    dh, ff, vc = _ax("d_head", d_head), _ax("d_ff", d_ff), _ax("vocab", vocab)
    if block_size is False:
        positions = ops.learned((s, dm), name="wpe")
    else:
        blk = _ax("block", None if block_size is True else block_size)
        positions = ops.learned((blk, dm), name="wpe") >> ops.slice(blk, s, name="wpe_read")
    key = Axis("seq_k")
    drop = _dropout(dropout, "gpt")
    blocks = [
        transformer_block(
            s, dm, h, dh, ff, seq_k=key, spherical=spherical, dropout=dropout, label=f"blocks.{i}"
        )
        for i in range(layers)
    ]
    ln_f = layernorm(dm, label="ln_f")

    @trace(inputs=[ArrayType((s,), "int64")], name="gpt", label="gpt")
    def model(tokens: Tensor) -> Tensor:
        x = drop(ops.embedding(vc, dm, name="wte")(tokens) + positions())
        for block in blocks:
            x = block(x)
        return ops.linear(dm, vc, bias=False, name="lm_head")(ln_f(x))  # type: ignore[no-any-return]

    return model


def moe(
    seq: AxisArg = "seq",
    d_model: AxisArg = "d_model",
    d_ff: AxisArg = "d_ff",
    experts: AxisArg = "experts",
    *,
    k: int = 2,
    activation: str = "gelu",
    label: str = "moe",
) -> Term:
    """A mixture of experts: a linear router over ``experts``, top-``k`` gates (softmax over the
    k best scores, zero elsewhere) and the gate-weighted sum of the selected expert MLPs."""
    from ncd.primitives.routing import Experts, TopKGate

    s, dm, ff, ex = (
        _ax("seq", seq),
        _ax("d_model", d_model),
        _ax("d_ff", d_ff),
        _ax("experts", experts),
    )
    router = ops.linear(dm, ex, bias=False, name="router")
    gate = ops.prim(TopKGate(ex, k, name="gate"))
    bank = ops.prim(Experts(ex, dm, ff, k, activation, name="experts"))

    @trace(inputs=[ArrayType((s, dm))], name="moe", label=label)
    def body(x: Tensor) -> Tensor:
        return bank(x, gate(router(x)))  # type: ignore[no-any-return]

    return body


# -- losses ------------------------------------------------------------------------------------


class _Typed(Term):
    """A term made when it is lowered, from the types its inputs have then (``None`` for an
    input no op has typed yet): a loss reduces over whatever axes its inputs carry."""

    __slots__ = ("make",)

    def __init__(self, n_in: int, make: Callable[[Sequence[ArrayType | None]], Term]) -> None:
        super().__init__(n_in, 1)
        self.make = make

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        # Under ``.over(axes)`` an input whose type is still open is a hole lifted by those
        # axes: they are loop axes of the term, not axes it reduces over. The term is made
        # from its inputs' types without them (the lifted ops then loop over them), so
        # ``(gpt >> nn.cross_entropy()).over(batch)`` gives a loss per batch index.
        lifted = {b.resolve(a) for ref in ins if isinstance(ref, Hole) for a in ref.lift}
        types: list[ArrayType | None] = []
        for ref in ins:
            v = b.value_of(ref)
            if v is None:
                types.append(None)
                continue
            t = b.values[v]
            keep = tuple(a for a in t.axes if b.resolve(a) not in lifted)
            types.append(t if len(keep) == len(t.axes) else ArrayType(keep, t.dtype))
        return self.make(types).lower(b, ins)


def _class_axis(what: str, logits: ArrayType | None, vocab: AxisArg) -> tuple[ArrayType, Axis]:
    """The logits' type and their class axis (an ``Axis``, a name, or the last axis)."""
    if logits is None:
        axis = _ax("vocab", vocab)
        return ArrayType((axis,)), axis
    if isinstance(vocab, Axis) and vocab in logits.axes:
        return logits, vocab
    name = vocab if isinstance(vocab, str) else getattr(vocab, "name", "vocab")
    named = [a for a in logits.axes if a.name == name]
    if len(named) == 1:
        return logits, named[0]
    if not logits.axes:
        raise DefinitionError(
            f"{what}: the logits are a scalar, with no class axis. Fix: feed logits [... vocab]."
        )
    return logits, logits.axes[-1]


def _one_hot(ids: Tensor, vocab: Axis, fmt: str) -> Tensor:
    """``[ids..., vocab]`` one-hot rows in ``fmt``: the ids against an index ramp (O(|vocab|) to
    build), compared in float32 whatever the model's format (``pinned_format``), so every id
    below 2^24 finds its own class (bfloat16 tells whole numbers apart only to 256)."""
    with pinned_format(float32):
        hot = ops.eq()(ops.cast(float32)(ids), ops.arange(vocab)())
    return ops.cast(fmt)(hot)  # type: ignore[no-any-return]


def _kept(ids: Tensor, ignore: int, fmt: str) -> Tensor:
    """1.0 where an id is not ``ignore``, else 0.0, in ``fmt`` (compared as ``_one_hot``)."""
    with pinned_format(float32):
        keep = ops.ne(float(ignore))(ops.cast(float32)(ids))
    return ops.cast(fmt)(keep)  # type: ignore[no-any-return]


def _mean_over(x: Tensor, axes: Sequence[Axis]) -> Tensor:
    return ops.mean(tuple(axes))(x) if axes else x


def cross_entropy(
    vocab: AxisArg = "vocab",
    *,
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    label: str = "loss",
) -> Term:
    """Cross-entropy of logits ``[... vocab]`` against integer targets ``[...]``, averaged over
    every axis but ``vocab`` (the logits' axis of that name, else their last): two inputs,
    logits then targets, one scalar output. Computed through a fused log-softmax
    (``logsumexp(z) - z[target]``, the maximum subtracted first), never ``log(softmax)``.
    ``ignore_index``: positions whose target is that id count for nothing (the mean is over
    the others); ``label_smoothing`` ``e``: the target distribution is ``(1 - e) one_hot + e /
    |vocab|``, as in PyTorch."""
    if not isinstance(label_smoothing, int | float) or not 0.0 <= label_smoothing <= 1.0:
        raise DefinitionError(
            f"cross_entropy: label_smoothing must be in [0, 1], got {show(label_smoothing)}. "
            "Fix: pass e.g. label_smoothing=0.1."
        )
    if ignore_index is not None and (
        isinstance(ignore_index, bool) or not isinstance(ignore_index, int)
    ):
        raise DefinitionError(
            f"cross_entropy: ignore_index must be an int id, got {show(ignore_index)}. Fix: "
            "pass e.g. ignore_index=-100."
        )
    smooth = float(label_smoothing)

    def make(types: Sequence[ArrayType | None]) -> Term:
        logits, v = _class_axis("cross_entropy", types[0], vocab)
        rest = tuple(a for a in logits.axes if a != v)
        targets = types[1] or ArrayType(rest, "int64")

        @trace(inputs=[logits, targets], name="cross_entropy", label=label)
        def body(z: Tensor, t: Tensor) -> Tensor:
            top = ops.max(v)(z)
            lse = ops.unary("log")(ops.sum(v)(ops.unary("exp")(z - top))) + top
            # the target logit: a gather (ids out of range refused) where every id is a
            # class; one-hot rows where ignore_index may lie outside the classes
            if ignore_index is None:
                picked = ops.gather(v)(t, z)
            else:
                picked = ops.sum(v)(_one_hot(t, v, logits.dtype) * z)
            loss = lse - picked
            if smooth:
                loss = (1.0 - smooth) * loss + smooth * (lse - ops.mean(v)(z))
            if ignore_index is None:
                return _mean_over(loss, rest)
            keep = _kept(t, ignore_index, logits.dtype)
            if not rest:
                return loss * keep  # type: ignore[no-any-return]
            count = ops.maximum(1.0)(ops.sum(rest)(keep))
            return ops.sum(rest)(loss * keep) / count  # type: ignore[no-any-return]

        return body

    return _Typed(2, make)


def nll(vocab: AxisArg = "vocab", *, label: str = "loss") -> Term:
    """Negative log-likelihood of log-probabilities ``[... vocab]`` at integer targets
    ``[...]``, averaged over every axis but ``vocab``."""

    def make(types: Sequence[ArrayType | None]) -> Term:
        logp, v = _class_axis("nll", types[0], vocab)
        rest = tuple(a for a in logp.axes if a != v)
        targets = types[1] or ArrayType(rest, "int64")

        @trace(inputs=[logp, targets], name="nll", label=label)
        def body(z: Tensor, t: Tensor) -> Tensor:
            return _mean_over(-ops.gather(v)(t, z), rest)

        return body

    return _Typed(2, make)


def _pointwise_loss(
    what: str,
    label: str,
    fn: Callable[[Tensor, Tensor], Tensor],
    reduce: Callable[[Tensor, ArrayType], Tensor] | None = None,
) -> Term:
    """A loss of a prediction against a target of the same axes: ``fn`` per element, then
    ``reduce`` (by default the mean over every axis)."""

    def make(types: Sequence[ArrayType | None]) -> Term:
        pred = types[0] or types[1]
        if pred is None:
            raise DefinitionError(
                f"{what}: neither input has a type yet. Fix: compose it after a model "
                f"(model >> nn.{what}()) or trace it with typed inputs."
            )

        @trace(inputs=[pred, pred], name=what, label=label)
        def body(y: Tensor, target: Tensor) -> Tensor:
            per = fn(y, target)
            return reduce(per, pred) if reduce is not None else _mean_over(per, pred.axes)

        return body

    return _Typed(2, make)


def mse(*, label: str = "loss") -> Term:
    """Mean squared error of a prediction against a target of the same axes (mean over all)."""
    return _pointwise_loss("mse", label, lambda y, t: ops.unary("square")(y - t))


def l1(*, label: str = "loss") -> Term:
    """Mean absolute error of a prediction against a target of the same axes (torch's
    ``l1_loss``, mean over all; its gradient at a tie is 0)."""
    return _pointwise_loss("l1", label, lambda y, t: ops.unary("abs")(y - t))


def kl_div(*, reduction: str = "batchmean", label: str = "loss") -> Term:
    """KL divergence of log-probabilities ``[... classes]`` (the first input) from target
    probabilities of the same axes, as torch's ``kl_div(input, target, reduction=...)``:
    ``target * (log(target) - input)`` per element, 0 where the target is 0. ``reduction``:
    ``"batchmean"`` (the divergence: summed over the last axis, averaged over the others),
    ``"mean"`` (averaged over every element, torch's default) or ``"sum"``."""
    if reduction not in ("batchmean", "mean", "sum"):
        raise DefinitionError(
            f"kl_div: unknown reduction {show(reduction)}. Fix: pass 'batchmean', 'mean' or 'sum'."
        )

    def term(logp: Tensor, target: Tensor) -> Tensor:
        # 0 * log 0 is 0: the log reads max(target, 1e-30) and the product keeps the 0
        safe = ops.unary("log")(ops.maximum(1e-30)(target))
        return target * (safe - logp)  # type: ignore[no-any-return]

    def reduce(per: Tensor, t: ArrayType) -> Tensor:
        if reduction == "sum" or (reduction == "batchmean" and len(t.axes) < 2):
            return ops.sum(t.axes)(per) if t.axes else per
        if reduction == "mean":
            return _mean_over(per, t.axes)
        return _mean_over(ops.sum(t.axes[-1])(per), t.axes[:-1])

    return _pointwise_loss("kl_div", label, term, reduce)


import ncd.primitives.routing  # noqa: E402, F401  (registers the routing ops at import)
from ncd._bert import bert, bert_attention, bert_layer  # noqa: E402
from ncd._llama import gqa_attention, llama, llama_block, swiglu  # noqa: E402
from ncd.conv import (  # noqa: E402  (windows then an einsum; pooling a windowed reduction)
    avg_pool1d,
    avg_pool2d,
    batch_norm,
    cnn,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    group_norm,
    instance_norm,
    max_pool1d,
    max_pool2d,
    resnet_block,
)
from ncd.rnn import gru, lstm, rnn, rnn_lm  # noqa: E402
