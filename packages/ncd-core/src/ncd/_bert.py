"""BERT in the model zoo (re-exported by ``ncd.nn``): a post-norm, bidirectional encoder with
token-type embeddings and a padding mask (Devlin et al. 2019).

Parameter names follow Hugging Face's ``BertModel`` (``encoder.layer.0.attention.self.query
.weight``...), and every weight is HF's with its head dims split off (``query``: ``(heads,
d_head, d_model)`` for HF's ``(heads * d_head, d_model)``): a reshape converts one into the
other, so HF's state dict loads into the export. The scopes are HF's modules (``self``,
``output``, ``intermediate``), so the diagram reads as HF's model does.
"""

from __future__ import annotations

from ncd import ops
from ncd._term import Term
from ncd._trace import Tensor, trace
from ncd.axis import ArrayType, Axis, axis_arg

__all__ = ["bert", "bert_attention", "bert_layer"]

#: the additive score of a padded key: float32's lowest value, as HF's extended mask
_MASKED = -3.4028234663852886e38


def _ax(default: str, value: object) -> Axis:
    return axis_arg(default, value)  # type: ignore[arg-type]


def _residual_norm(dm: Axis, width: tuple[Axis, ...], eps: float, label: str) -> Term:
    """HF's ``BertSelfOutput``/``BertOutput``: ``LayerNorm(dense(h) + x)``, fed ``(h, x)``."""
    norm = ops.layernorm(dm, eps=eps, name="LayerNorm")

    @trace(inputs=[ArrayType(width), ArrayType((dm,))], name="bert_output", label=label)
    def body(h: Tensor, x: Tensor) -> Tensor:
        return norm(ops.linear(width, dm, name="dense")(h) + x)  # type: ignore[no-any-return]

    return body


def bert_attention(
    seq: object = "seq",
    d_model: object = "d_model",
    heads: object = "heads",
    d_head: object = "d_head",
    *,
    seq_k: object = "seq_k",
    eps: float = 1e-12,
    label: str = "attention",
) -> Term:
    """Bidirectional self-attention and its post-norm residual, fed ``(x [seq d_model], keep
    [seq_k])``: ``keep`` is 1.0 for a real token and 0.0 for padding (its keys' scores get
    float32's lowest value added, as HF's extended mask: a row of padding only attends
    uniformly). ``LayerNorm(x + output.dense(attention))``."""
    s, dm = _ax("seq", seq), _ax("d_model", d_model)
    h, dh, key = _ax("heads", heads), _ax("d_head", d_head), _ax("seq_k", seq_k)
    scores = ops.einsum("q d, x d -> q x", q=s, x=key, d=dh) >> ops.scale(dh, -0.5)
    mix = ops.einsum("q x, x v -> q v", q=s, x=key, v=dh)
    out = _residual_norm(dm, (h, dh), eps, "output")

    @trace(inputs=[ArrayType((s, dm)), ArrayType((key,))], name="bert_self", label="self")
    def attend(x: Tensor, keep: Tensor) -> Tensor:
        q = ops.linear(dm, (h, dh), name="query")(x)
        k = ops.rename(s, key)(ops.linear(dm, (h, dh), name="key")(x))
        v = ops.rename(s, key)(ops.linear(dm, (h, dh), name="value")(x))
        p = ops.softmax(key)(scores(q, k) + (1.0 - keep) * _MASKED)
        return mix(p, v)  # type: ignore[no-any-return]

    @trace(inputs=[ArrayType((s, dm)), ArrayType((key,))], name="bert_attention", label=label)
    def body(x: Tensor, keep: Tensor) -> Tensor:
        return out(attend(x, keep), x)  # type: ignore[no-any-return]

    return body


def bert_layer(
    seq: object = "seq",
    d_model: object = "d_model",
    heads: object = "heads",
    d_head: object = "d_head",
    d_ff: object = "d_ff",
    *,
    seq_k: object = "seq_k",
    eps: float = 1e-12,
    label: str = "layer",
) -> Term:
    """HF's ``BertLayer``, post-norm: ``x = LayerNorm(x + attention(x))`` then ``LayerNorm(x +
    output.dense(gelu(intermediate.dense(x))))``; fed ``(x, keep)``."""
    s, dm, ff = _ax("seq", seq), _ax("d_model", d_model), _ax("d_ff", d_ff)
    key = _ax("seq_k", seq_k)
    attn = bert_attention(s, dm, heads, d_head, seq_k=key, eps=eps)
    out = _residual_norm(dm, (ff,), eps, "output")

    @trace(inputs=[ArrayType((dm,))], name="bert_intermediate", label="intermediate")
    def intermediate(x: Tensor) -> Tensor:
        return ops.gelu()(ops.linear(dm, ff, name="dense")(x))  # type: ignore[no-any-return]

    @trace(inputs=[ArrayType((s, dm)), ArrayType((key,))], name="bert_layer", label=label)
    def body(x: Tensor, keep: Tensor) -> Tensor:
        x = attn(x, keep)
        return out(intermediate(x), x)  # type: ignore[no-any-return]

    return body


def bert(
    layers: int = 2,
    *,
    seq: object = "seq",
    d_model: object = "d_model",
    heads: object = "heads",
    d_head: object = "d_head",
    d_ff: object = "d_ff",
    vocab: object = "vocab",
    block: object = "block",
    types: object = "types",
    eps: float = 1e-12,
    pooler: bool = False,
) -> Term:
    """A BERT encoder (HF's ``BertModel``): the sum of word, position and token-type
    embeddings under a LayerNorm, then ``layers`` post-norm bidirectional layers. Inputs: token
    ids ``[seq]``, token types ``[seq]`` (ids below ``|types|``) and the attention mask
    ``[seq]`` (1 for a token, 0 for padding, int64); output: the last hidden state ``[seq
    d_model]``, and with ``pooler`` also HF's ``pooler_output`` ``[d_model]``
    (``tanh(pooler.dense(h[0]))``, the first token's state). The position table is ``[block
    d_model]`` (``max_position_embeddings``), its first ``|seq|`` rows read, so any length up
    to it runs."""
    from ncd.nn import _count

    _count("bert: layers", layers, 0)
    s, dm, vc = _ax("seq", seq), _ax("d_model", d_model), _ax("vocab", vocab)
    h, dh, ff = _ax("heads", heads), _ax("d_head", d_head), _ax("d_ff", d_ff)
    blk, tt = _ax("block", block), _ax("types", types)
    key = Axis("seq_k")
    stack = [
        bert_layer(s, dm, h, dh, ff, seq_k=key, eps=eps, label=f"layer.{i}") for i in range(layers)
    ]
    positions = ops.learned((blk, dm), name="position_embeddings") >> ops.slice(
        blk, s, name="positions"
    )
    norm = ops.layernorm(dm, eps=eps, name="LayerNorm")
    ids = ArrayType((s,), "int64")

    @trace(inputs=[ids, ids], name="bert_embeddings", label="embeddings")
    def embeddings(tokens: Tensor, token_types: Tensor) -> Tensor:
        words = ops.embedding(vc, dm, name="word_embeddings")(tokens)
        kinds = ops.embedding(tt, dm, name="token_type_embeddings")(token_types)
        return norm(words + positions() + kinds)  # type: ignore[no-any-return]

    @trace(inputs=[ArrayType((s, dm)), ArrayType((key,))], name="bert_encoder", label="encoder")
    def encoder(x: Tensor, keep: Tensor) -> Tensor:
        for layer in stack:
            x = layer(x, keep)
        return x

    first = Axis("first", size=1)

    @trace(inputs=[ArrayType((s, dm))], name="bert_pooler", label="pooler")
    def pool(h: Tensor) -> Tensor:
        cls = ops.sum(first)(ops.slice(s, first, name="first_token")(h))
        return ops.unary("tanh")(ops.linear(dm, dm, name="dense")(cls))  # type: ignore[no-any-return]

    @trace(inputs=[ids, ids, ArrayType((s,), "int64")], name="bert", label="bert")
    def model(tokens: Tensor, token_types: Tensor, mask: Tensor) -> Tensor | tuple[Tensor, ...]:
        keep = ops.rename(s, key)(ops.cast("float32")(mask))
        hidden = encoder(embeddings(tokens, token_types), keep)
        return (hidden, pool(hidden)) if pooler else hidden

    return model
