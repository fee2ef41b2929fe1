"""The typed loop IR (``ncd.codegen.ir``) and its C-style renderer, without a device: one tree,
two dialects; C's precedence; the names an expression reads; typed constants."""

from __future__ import annotations

import pytest

import ncd
from ncd import ops
from ncd.codegen import Dialect, ir, render_kernel
from ncd.codegen.render import render_expr, render_stmt, type_name
from ncd.codegen.source import Writer
from ncd.kernel import unfused

C = Dialect(name="c-like")
CUDA_LIKE = Dialect(
    name="cuda",
    global_="",
    index64="long long",
    math={"exp": "expf", "fmax_any": "fmaxf"},
    intrinsics={"exp:float64": "exp"},
    vector_width=0,
)
WIDE = Dialect(name="vectors", vector_width=8)

i = ir.Var("i", "int32")
j = ir.Var("j", "int32")
x = ir.Var("x", "float32")


def r(e: ir.Expr, d: Dialect = C) -> str:
    return render_expr(e, d)


def test_precedence_keeps_the_grouping_written() -> None:
    assert r(i - (j - 1)) == "i - (j - 1)"
    assert r((i - j) - 1) == "i - j - 1"
    assert r(i * (j + 1)) == "i * (j + 1)"
    assert r(i + j * 2) == "i + j * 2"
    assert r(i / (j * 2)) == "i / (j * 2)"
    assert r(-(i + j)) == "-(i + j)"
    # float addition does not associate: a right-nested sum keeps its parentheses
    y = ir.Var("y", "float32")
    assert r(x + (y + x)) == "x + (y + x)"
    cond = ir.Select(i.cmp("<", j), x, ir.Const(0.0, "float32"))
    assert r(cond) == "i < j ? x : 0.0f"
    assert r(ir.Bin("&&", i.cmp("==", 0), j.cmp("!=", 1), "int32")) == "i == 0 && j != 1"


def test_one_tree_renders_in_each_dialect() -> None:
    e = ir.Call("exp", (x - ir.Const(1.5, "float32"),), "float32")
    assert r(e) == "exp(x - 1.5f)"
    assert r(e, CUDA_LIKE) == "expf(x - 1.5f)"
    # an intrinsic is looked up by name *and* dtype
    d = ir.Call("exp", (ir.Var("z", "float64"),), "float64")
    assert r(d, CUDA_LIKE) == "exp(z)"
    wide = ir.Var("k", "int64")
    decl = ir.Decl(wide, ir.Const(0, "int64"), const=True)
    assert render_stmt(decl, C) == "const long k = 0;"
    assert render_stmt(decl, CUDA_LIKE) == "const long long k = 0;"
    assert type_name("float32x8", WIDE) == "float8"
    assert type_name("float32*", C) == "float*"
    assert render_stmt(ir.For(i, ir.Const(0, "int32"), ir.Const(7, "int32")), C) == (
        "for (int i = 0; i < 7; ++i)"
    )
    assert render_stmt(ir.For(i, j, j + 13, 4), C) == "for (int i = j; i < j + 13; i += 4)"


def test_literals_are_typed_values() -> None:
    assert r(ir.Const(1.0, "float64")) == "1.0"
    assert r(ir.Const(2.5, "float32")) == "2.5f"
    assert r(ir.Const(3, "uint32")) == "3u"
    assert r(x - ir.Const(-1.0, "float32")) == "x - -1.0f"  # spaced: never ``--``
    assert r(ir.Broadcast(ir.Const(0.0, "float32"), "float32x8"), WIDE) == "(float8)(0.0f)"
    # integers mix with index expressions; a float operand has no format of its own
    assert (i + 1).b == ir.Const(1, "int32")
    assert (ir.Var("n", "int64") * 2).b == ir.Const(2, "int64")
    with pytest.raises(TypeError, match="integers"):
        _ = x * 0.5


def test_equal_trees_are_equal_values_and_know_their_names() -> None:
    a = ir.Load("buf", i * 7 + j, "float32", "float32")
    b = ir.Load("buf", i * 7 + j, "float32", "float32")
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != ir.Load("buf", i * 7 + j + 0, "float32", "float32")
    assert a.names == {"buf", "i", "j"}
    assert ir.Raw("n_seq - 1").names == {"n_seq"}
    assert ir.Assign(ir.Elem("acc", j, "float32"), x, "+=").names == {"acc", "j", "x"}
    # a scalar times a vector is a vector
    v = ir.Var("v", "float32x8")
    assert (x * v).type == "float32x8" and (v * x).type == "float32x8"
    assert ir.Lane(v, 3).type == "float32"


def test_text_needs_a_dialect() -> None:
    with pytest.raises(TypeError, match="outside kernel generation"):
        str(i + 1)
    with ir.rendering(CUDA_LIKE):
        assert f"{i + 1}" == "i + 1"


def test_hoisting_follows_the_names_an_expression_reads() -> None:
    w = Writer()
    with w.block(ir.For(i, ir.Const(0, "int32"), ir.Const(4, "int32")), "i"):
        with w.block(ir.For(j, ir.Const(0, "int32"), ir.Const(4, "int32")), "j"):
            assert w.depth_for([i * 4]) == 1
            assert w.depth_for([i * 4 + j]) == 2
            assert w.depth_for([ir.Raw("n_seq")]) == 0
            with w.at_depth(w.depth_for([i * 4])):
                w.line(ir.Decl(ir.Var("t", "int32"), i * 4, const=True))
    text = w.render(0, C)
    assert text.index("const int t = i * 4;") < text.index("for (int j")


def test_generated_kernels_are_rendered_from_the_ir() -> None:
    # a normaliser's kernel is IR to its last line: a second dialect changes only its tokens
    q, k = ncd.Axis("q", size=7), ncd.Axis("x", size=13)
    model = ops.softmax(k).over(q)
    a = render_kernel(unfused(model).kernels[0], C).text
    b = render_kernel(unfused(model).kernels[0], CUDA_LIKE).text
    assert "exp(" in a and "expf(" in b and "exp(" not in b.replace("expf(", "")
