"""The Llama family in the model zoo (re-exported by ``ncd.nn``): SwiGLU, grouped-query
attention with rotary embeddings, the pre-RMSNorm block and the whole model.

Parameter names follow Hugging Face's ``LlamaForCausalLM`` (``model.layers.0.self_attn.q_proj
.weight``...), and every weight is HF's with its head dims split off (``q_proj``:
``(kv_heads, group, d_head, d_model)`` for HF's ``(heads * d_head, d_model)``, query head
``kv * |group| + g``, as ``repeat_kv`` pairs them): a reshape converts one into the other.
"""

from __future__ import annotations

from ncd import ops
from ncd._term import Term
from ncd._trace import Tensor, trace
from ncd.axis import ArrayType, Axis, axis_arg
from ncd.errors import DefinitionError

__all__ = ["gqa_attention", "llama", "llama_block", "swiglu"]


def _ax(default: str, value: object) -> Axis:
    return axis_arg(default, value)  # type: ignore[arg-type]


def swiglu(d_model: object = "d_model", d_ff: object = "d_ff", *, label: str = "mlp") -> Term:
    """``down(silu(gate(x)) * up(x))`` (Shazeer 2020, GLU variants): Llama's MLP, no biases."""
    dm, ff = _ax("d_model", d_model), _ax("d_ff", d_ff)

    @trace(inputs=[ArrayType((dm,))], name="swiglu", label=label)
    def body(x: Tensor) -> Tensor:
        gate = ops.unary("silu")(ops.linear(dm, ff, bias=False, name="gate_proj")(x))
        up = ops.linear(dm, ff, bias=False, name="up_proj")(x)
        return ops.linear(ff, dm, bias=False, name="down_proj")(gate * up)  # type: ignore[no-any-return]

    return body


def gqa_attention(
    seq: object = "seq",
    d_model: object = "d_model",
    kv_heads: object = "kv_heads",
    group: object = "group",
    d_head: object = "d_head",
    *,
    seq_k: object = "seq_k",
    causal: bool = True,
    rope_base: float | None = 10000.0,
    label: str = "self_attn",
) -> Term:
    """Grouped-query self-attention (Ainslie et al. 2023): queries over ``kv_heads x group``
    heads, keys and values over ``kv_heads`` only, read by every query head of their group by
    broadcasting over ``group`` (K and V are never copied). Rotary embeddings on queries and
    keys unless ``rope_base`` is ``None``; no biases (Llama's projections)."""
    s, dm = _ax("seq", seq), _ax("d_model", d_model)
    kv, g, dh = _ax("kv_heads", kv_heads), _ax("group", group), _ax("d_head", d_head)
    key = _ax("seq_k", seq_k)
    from ncd.nn import attention

    core = attention(s, key, dh, dh, causal=causal)

    def rope(t: Tensor) -> Tensor:
        return t if rope_base is None else ops.rotary(s, dh, base=rope_base)(t)

    @trace(inputs=[ArrayType((s, dm))], name="gqa_attention", label=label)
    def body(x: Tensor) -> Tensor:
        q = rope(ops.linear(dm, (kv, g, dh), bias=False, name="q_proj")(x))
        k = rope(ops.linear(dm, (kv, dh), bias=False, name="k_proj")(x))
        v = ops.linear(dm, (kv, dh), bias=False, name="v_proj")(x)
        k, v = ops.rename(s, key)(k), ops.rename(s, key)(v)
        return ops.linear((kv, g, dh), dm, bias=False, name="o_proj")(core(q, k, v))  # type: ignore[no-any-return]

    return body


def llama_block(
    seq: object = "seq",
    d_model: object = "d_model",
    kv_heads: object = "kv_heads",
    group: object = "group",
    d_head: object = "d_head",
    d_ff: object = "d_ff",
    *,
    seq_k: object = "seq_k",
    rope_base: float = 10000.0,
    eps: float = 1e-6,
    label: str = "block",
) -> Term:
    """Llama's block: ``x + self_attn(input_layernorm(x))`` then
    ``x + mlp(post_attention_layernorm(x))``, RMSNorms, GQA with RoPE, a SwiGLU MLP."""
    from ncd.nn import rmsnorm

    s, dm = _ax("seq", seq), _ax("d_model", d_model)
    attn = gqa_attention(s, dm, kv_heads, group, d_head, seq_k=seq_k, rope_base=rope_base)
    mlp = swiglu(dm, d_ff)
    n1 = rmsnorm(dm, eps=eps, label="input_layernorm")
    n2 = rmsnorm(dm, eps=eps, label="post_attention_layernorm")

    @trace(inputs=[ArrayType((s, dm))], name="llama_block", label=label)
    def block(x: Tensor) -> Tensor:
        x = x + attn(n1(x))
        return x + mlp(n2(x))  # type: ignore[no-any-return]

    return block


def llama(
    layers: int = 2,
    *,
    seq: object = "seq",
    d_model: object = "d_model",
    heads: object = "heads",
    kv_heads: object = "kv_heads",
    d_head: object = "d_head",
    d_ff: object = "d_ff",
    vocab: object = "vocab",
    rope_base: float = 10000.0,
    eps: float = 1e-6,
) -> Term:
    """A Llama (Touvron et al. 2023): token embedding, ``layers`` blocks (RMSNorm, grouped-query
    attention with rotary embeddings, SwiGLU), a final RMSNorm and an untied unembedding.
    Input: token ids ``[seq]``; output: logits ``[seq vocab]``. ``heads`` query heads share
    ``kv_heads`` key/value heads: with both ints the group axis has ``heads // kv_heads``
    entries, else it is the free axis ``group``. No positional table: any length runs."""
    from ncd.nn import _count, rmsnorm

    _count("llama: layers", layers, 0)
    kv = _ax("kv_heads", kv_heads)
    if isinstance(heads, int) and not isinstance(heads, bool):
        if kv.size is None or not isinstance(kv.size, int) or heads % kv.size:
            raise DefinitionError(
                f"llama: {heads} query heads cannot be shared by {kv.describe()}. Fix: pass "
                "kv_heads as an int that divides heads (e.g. heads=8, kv_heads=2)."
            )
        g = Axis("group", size=heads // kv.size)
    else:
        g = Axis("group")
    s, dm, dh = _ax("seq", seq), _ax("d_model", d_model), _ax("d_head", d_head)
    ff, vc = _ax("d_ff", d_ff), _ax("vocab", vocab)
    key = Axis("seq_k")
    blocks = [
        llama_block(
            s, dm, kv, g, dh, ff, seq_k=key, rope_base=rope_base, eps=eps, label=f"layers.{i}"
        )
        for i in range(layers)
    ]
    norm = rmsnorm(dm, eps=eps, label="norm")

    @trace(inputs=[ArrayType((s,), "int64")], name="llama_model", label="model")
    def body(tokens: Tensor) -> Tensor:
        x = ops.embedding(vc, dm, name="embed_tokens")(tokens)
        for block in blocks:
            x = block(x)
        return norm(x)  # type: ignore[no-any-return]

    @trace(inputs=[ArrayType((s,), "int64")], name="llama", label="llama")
    def model(tokens: Tensor) -> Tensor:
        return ops.linear(dm, vc, bias=False, name="lm_head")(body(tokens))  # type: ignore[no-any-return]

    return model
