"""Every constructor misuse is an ``NcdError`` with a fix (issue 10, finding 10): the public
constructors of ``ncd``, ``ncd.ops`` and ``ncd.nn`` tried with bad arguments, one row each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ncd
from ncd import nn, ops
from ncd.primitives.routing import Experts, TopKGate

d, e, s = ncd.axes("d e s", d=7, e=13, s=1)

#: (what is misused, the call); each must raise an NcdError whose message ends with a Fix.
MISUSES: list[tuple[str, Callable[[], Any]]] = [
    ("einsum without ->", lambda: ops.einsum("q d, x d")),
    ("einsum with two ->", lambda: ops.einsum("q d -> x -> y")),
    ("einsum with two outputs", lambda: ops.einsum("q d -> q, d")),
    ("einsum operand repeats an axis (Gram X X^T)", lambda: ops.einsum("s d, s d -> s s")),
    ("einsum operand repeats an axis in one input", lambda: ops.einsum("s s -> s")),
    ("einsum output axis in no input", lambda: ops.einsum("s d -> t")),
    ("einsum given a bool size", lambda: ops.einsum("s d -> s", d=True)),
    ("einsum given a float size", lambda: ops.einsum("s d -> s", d=2.5)),
    ("einsum spec not a string", lambda: ops.einsum(5)),  # type: ignore[arg-type]
    ("rearrange unbalanced (", lambda: ops.rearrange("s (h e -> s h e", h=2)),
    ("rearrange unbalanced )", lambda: ops.rearrange("s h e) -> s h e", h=2)),
    ("rearrange nested (", lambda: ops.rearrange("((a b) c) -> a b c", a=2, b=2)),
    ("rearrange empty group", lambda: ops.rearrange("s () -> s")),
    ("rearrange without ->", lambda: ops.rearrange("s (h e)")),
    ("rearrange two unsized parts", lambda: ops.rearrange("(h e) -> h e")),
    ("unknown unary", lambda: ops.unary("expp")),
    ("unknown binary", lambda: ops.binary("plus")),
    ("unknown scalar fn", lambda: ops.scalar("plus", 1.0)),
    ("unknown reduce fn", lambda: ops.reduce("median", "d")),
    ("unknown gelu approximation", lambda: ops.gelu(approximate="fast")),
    ("unknown learned init", lambda: ops.learned("d", init="xavier")),
    ("unknown causal fill", lambda: ops.causal_mask(fill="-1")),
    ("dropout p = 1.5", lambda: ops.dropout(1.5)),
    ("dropout p = 1", lambda: ops.dropout(1.0)),
    ("dropout p < 0", lambda: ops.dropout(-0.1)),
    ("dropout p NaN", lambda: ops.dropout(float("nan"))),
    ("dropout p a string", lambda: ops.dropout("0.1")),  # type: ignore[arg-type]
    ("scalar NaN constant", lambda: ops.add(float("nan"))),
    ("scalar inf constant", lambda: ops.mul(float("inf"))),
    ("scalar 400-digit constant", lambda: ops.mul(10**400)),
    ("scalar bool constant", lambda: ops.mul(True)),
    ("constant NaN value", lambda: ops.constant(float("nan"))),
    ("scale inf power", lambda: ops.scale("d", float("inf"))),
    ("layernorm negative eps", lambda: ops.layernorm("d", eps=-1e-5)),
    ("rmsnorm NaN eps", lambda: ops.rmsnorm("d", eps=float("nan"))),
    ("l2norm inf eps", lambda: ops.l2norm("d", eps=float("inf"))),
    ("layernorm affine not a bool", lambda: ops.layernorm("d", affine="yes")),  # type: ignore[arg-type]
    ("linear without ->", lambda: ops.linear("d e")),
    ("linear bias not a bool", lambda: ops.linear(d, e, bias=1)),  # type: ignore[arg-type]
    ("embedding two table axes", lambda: ops.embedding("a b -> d")),
    ("embedding table axis also output", lambda: ops.embedding(d, (d,))),
    ("causal mask with one axis", lambda: ops.causal_mask("q", "q")),
    ("softmax over a number", lambda: ops.softmax(5)),  # type: ignore[arg-type]
    ("reduce over a dict", lambda: ops.sum({"d": 1})),  # type: ignore[arg-type]
    ("prim of a non-op", lambda: ops.prim("softmax")),  # type: ignore[arg-type]
    ("an op name with NUL", lambda: ops.softmax("d", name="a\x00b")),
    ("an op name with a newline", lambda: ops.linear(d, e, name="fc\n")),
    ("an op name not a string", lambda: ops.softmax("d", name=3)),  # type: ignore[arg-type]
    ("topk k = 0", lambda: TopKGate(e, 0)),
    ("experts with an unknown activation", lambda: Experts(e, d, s, 2, "swish")),
    ("Axis size 0", lambda: ncd.Axis("a", size=0)),
    ("Axis negative size", lambda: ncd.Axis("a", size=-3)),
    ("Axis bool size", lambda: ncd.Axis("a", size=True)),
    ("Axis float size", lambda: ncd.Axis("a", size=4.0)),  # type: ignore[arg-type]
    ("Axis numpy-less string size", lambda: ncd.Axis("a", size="4")),  # type: ignore[arg-type]
    ("Axis size above 2^62", lambda: ncd.Axis("a", size=2**62 + 1)),
    ("Axis size 10^100", lambda: ncd.Axis("a", size=10**100)),
    ("Axis empty name", lambda: ncd.Axis("")),
    ("Axis name with NUL", lambda: ncd.Axis("a\x00")),
    ("Axis name with a control character", lambda: ncd.Axis("a\x1bb")),
    ("Axis name with a lone surrogate", lambda: ncd.Axis("a\ud800")),
    ("Axis name not a string", lambda: ncd.Axis(3)),  # type: ignore[arg-type]
    ("Axis uid with a control character", lambda: ncd.Axis("a", uid="\x07")),
    ("axes with a size for an unnamed axis", lambda: ncd.axes("a b", c=3)),
    ("axes of a number", lambda: ncd.axes(3)),  # type: ignore[arg-type]
    ("ArrayType repeating an axis", lambda: ncd.ArrayType((d, d))),
    ("ArrayType of names", lambda: ncd.ArrayType(("d",))),  # type: ignore[arg-type]
    ("ArrayType unknown dtype", lambda: ncd.ArrayType((d,), "complex64")),
    ("identity of a number type", lambda: ncd.identity(d, 3)),  # type: ignore[arg-type]
    ("identity of a negative count", lambda: ncd.identity(-1)),
    ("copy of zero", lambda: ncd.copy(0)),
    ("copy of a string", lambda: ncd.copy("2")),  # type: ignore[arg-type]
    ("compose with a non-term", lambda: ops.exp() >> 3),  # type: ignore[operator]
    ("compose a non-term first", lambda: 3 >> ops.exp()),  # type: ignore[operator]
    ("parallel with a non-term", lambda: ops.exp() @ "x"),  # type: ignore[operator]
    ("lift over a number", lambda: ops.exp().over(3)),  # type: ignore[arg-type]
    ("named with an empty name", lambda: ops.exp().named("")),
    ("named with a NUL", lambda: ops.exp().named("blk\x00")),
    ("named with a control label", lambda: ops.exp().named("blk", "l\x01")),
    ("bind size 0", lambda: ops.softmax("d").bind(d=0)),
    ("bind size 10^100", lambda: ops.softmax("d").bind(d=10**100)),
    ("bind a float size", lambda: ops.softmax("d").bind(d=2.0)),  # type: ignore[arg-type]
    (
        "element count over int64 at bind",
        lambda: ops.einsum("a b, b c -> a c").bind(a=2**40, b=1, c=2**40),
    ),
    ("trace inputs not a list", lambda: ncd.trace(inputs=d)(lambda x: x)),  # type: ignore[arg-type]
    ("trace input of a number", lambda: ncd.trace(inputs=[3])(lambda x: x)),  # type: ignore[list-item]
    ("trace name with a NUL", lambda: ncd.trace(name="f\x00")(lambda x: ops.exp()(x))),
    (
        "trace int ids into exp",
        lambda: ncd.trace(inputs=[ncd.ArrayType((s,), "int64")])(lambda x: ops.exp()(x)),
    ),
    (
        "float values into an embedding",
        lambda: (ops.exp().over(s) >> ops.embedding("vocab -> d", vocab=3, d=2)).graph,
    ),
    ("nn size a float", lambda: nn.mlp(d_model=2.5)),  # type: ignore[arg-type]
    ("nn size a bool", lambda: nn.mlp(d_model=True)),
    ("nn size zero", lambda: nn.layernorm(0)),
    ("nn unknown activation", lambda: nn.mlp(activation="swish")),
    ("gpt negative layers", lambda: nn.gpt(layers=-1)),
    ("gpt layers a string", lambda: nn.gpt(layers="2")),  # type: ignore[arg-type]
    ("moe k = 0", lambda: nn.moe(k=0)),
    ("attention with a NUL label", lambda: nn.attention(label="a\x00")),
    ("gpt with 10^100 layers (used to hang)", lambda: nn.gpt(layers=10**100)),
    ("init of a non-model", lambda: ncd.init(5)),
    ("init with a string seed", lambda: ncd.init(ops.exp(), seed="x")),
    ("init with a negative seed", lambda: ncd.init(ops.exp(), seed=-1)),
    ("init with an int dtype", lambda: ncd.init(ops.exp(), dtype=np.int64)),
    ("run of a non-model", lambda: ncd.run("model", np.zeros(3))),
    ("run with params not a mapping", lambda: ncd.run(ops.exp().over(d), np.zeros(7), params=5)),
    ("run with a string seed", lambda: ncd.run(ops.exp().over(d), np.zeros(7), seed="a")),
]


@pytest.mark.parametrize(("what", "call"), MISUSES, ids=[w for w, _ in MISUSES])
def test_misuse_is_an_ncd_error_with_a_fix(what: str, call: Callable[[], Any]) -> None:
    with pytest.raises(ncd.NcdError) as info:
        call()
    assert "Fix:" in str(info.value) or "fix" in str(info.value).lower(), str(info.value)


def test_old_bare_exception_types_still_catch() -> None:
    with pytest.raises(ValueError):
        ops.dropout(1.5)
    with pytest.raises(TypeError):
        ncd.Axis(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="einsum operand"):
        ops.einsum("s d, s d -> s s")


def test_gram_matrix_message_says_how_to_write_it() -> None:
    with pytest.raises(
        ncd.DefinitionError, match=r"the output has s more than once.*rename one copy"
    ):
        ops.einsum("s d, s d -> s s")
    # ... and the written form runs: X X^T with a renamed copy.
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    gram = ncd.trace(inputs=[[s.with_size(2), d]])(
        lambda t: ops.einsum("s d, t d -> s t")(t, ops.rename("s", "t")(t))
    )
    np.testing.assert_allclose(ncd.run(gram, x), x @ x.T)


@pytest.mark.parametrize("name", ["a<b&\"c'", "ünïcødé λ", "CL_VERSION_1_", "x y"])
def test_printable_names_are_kept(name: str) -> None:
    a = ncd.Axis(name, size=3)
    m = ops.softmax(a, name=name)
    assert m.graph.nodes[0].op.name == name
    y = ncd.run(m, np.zeros(3, np.float32))
    np.testing.assert_allclose(y, np.full(3, 1 / 3), rtol=1e-6)


@pytest.mark.parametrize("ok", [0.0, 0.5, 0.999])
def test_valid_dropout_and_eps_build(ok: float) -> None:
    ops.dropout(ok)
    ops.layernorm("d", eps=ok)
    ops.scale("d", np.float32(-0.5))  # numpy scalars are numbers too


def test_numpy_integer_seeds_are_seeds() -> None:
    m = ops.linear(d, e)
    assert np.array_equal(
        ncd.init(m, seed=np.int64(3))["linear.weight"], ncd.init(m, seed=3)["linear.weight"]
    )


def test_size_limits_at_the_edges() -> None:
    assert ncd.Axis("a", size=2**62).size == 2**62
    assert ncd.Axis("a", size=1).size == 1
    model = ops.softmax("d").bind(d=301)
    assert model.graph.size(model.graph.axes[0]) == 301


#: an int Python refuses to print (str/repr stop at 4300 digits by default)
UNPRINTABLE = -(10**5000)


@pytest.mark.parametrize(
    ("what", "call"),
    [
        ("Axis size", lambda: ncd.Axis("a", size=UNPRINTABLE)),
        ("bind size", lambda: ops.softmax("d").bind(d=UNPRINTABLE)),
        ("scalar constant", lambda: ops.mul(UNPRINTABLE)),
        ("dropout p", lambda: ops.dropout(UNPRINTABLE)),
        ("topk k", lambda: TopKGate(e, UNPRINTABLE)),
        ("gpt layers", lambda: nn.gpt(layers=UNPRINTABLE)),
        ("init seed", lambda: ncd.init(ops.exp(), seed=UNPRINTABLE)),
        ("identity count", lambda: ncd.identity(UNPRINTABLE)),
        ("copy count", lambda: ncd.copy(UNPRINTABLE)),
        ("Axis name", lambda: ncd.Axis(UNPRINTABLE)),  # type: ignore[arg-type]
        ("ArrayType axes", lambda: ncd.ArrayType(UNPRINTABLE)),  # type: ignore[arg-type]
        ("dtype", lambda: ncd.ArrayType((d,), UNPRINTABLE)),  # type: ignore[arg-type]
        ("softmax axis", lambda: ops.softmax(UNPRINTABLE)),  # type: ignore[arg-type]
        ("einsum spec", lambda: ops.einsum(UNPRINTABLE)),  # type: ignore[arg-type]
        ("prim", lambda: ops.prim(UNPRINTABLE)),  # type: ignore[arg-type]
        ("compose", lambda: ops.exp() >> UNPRINTABLE),  # type: ignore[operator]
        ("lift", lambda: ops.exp().over(UNPRINTABLE)),  # type: ignore[arg-type]
        ("init of a non-model", lambda: ncd.init(UNPRINTABLE)),
        ("nn axis", lambda: nn.mlp(d_model=UNPRINTABLE)),
        ("nn activation", lambda: nn.mlp(activation=UNPRINTABLE)),  # type: ignore[arg-type]
    ],
)
def test_an_int_too_long_to_print_is_named_by_its_digits(
    what: str, call: Callable[[], Any]
) -> None:
    with pytest.raises(ncd.NcdError, match=r"an int of about \d+ digits.*Fix:"):
        call()
