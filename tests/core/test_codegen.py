"""ncd.codegen without a device: sanitising, hoisting, dialects, rule tables."""

from __future__ import annotations

from typing import ClassVar

import attrs

import ncd
from ncd import ops
from ncd.codegen import CODEGEN_RULES, Dialect, render_kernel, sanitize
from ncd.codegen.source import Writer
from ncd.kernel import unfused
from ncd.op import Op, Signature, register_op

CUDA_LIKE = Dialect(
    name="cuda",
    kernel='extern "C" __global__ void',
    global_="",
    local="__shared__",
    barrier="__syncthreads();",
    global_id="(int)(blockIdx.x * blockDim.x + threadIdx.x)",
    math={"exp": "expf", "fmax": "fmaxf", "rsqrt": "rsqrtf"},
)


def test_sanitize_makes_safe_identifiers() -> None:
    assert sanitize("blocks.0.attn/q weight") == "n_blocks_0_attn_q_weight"
    assert sanitize("w_blocks.0.attn/q weight", "w") == "w_blocks_0_attn_q_weight"
    assert sanitize("int") == "n_int"
    assert sanitize("9lives") == "n_9lives"
    assert sanitize("a*/b;--") == "n_a_b"
    assert sanitize("") == "n"
    # predefined macros, builtins, types and keywords go behind a class tag (issue 10)
    assert sanitize("constant", "t") == "t_constant"  # an op kind that is an OpenCL keyword
    for word in (
        "global",
        "local",
        "private",
        "kernel",
        "float",
        "int",
        "half",
        "bool",
        "const",
        "restrict",
        "static",
        "inline",
    ):  # no keyword is one of the generator's words
        assert sanitize(word, "t") == f"t_{word}"
    for name in ("CL_VERSION_1_0", "FP_ILOGB", "M_PI", "INFINITY", "get_global_id", "float8"):
        assert sanitize(name, "i") == f"i_{name}"


def test_axis_and_op_names_never_reach_source_raw() -> None:
    x = ncd.Axis("x; system(1)", size=5)
    r = ncd.Axis("*/ evil", size=3)
    m = ops.softmax(x, name="bad name").over(r)
    text = render_kernel(unfused(m).kernels[0], CUDA_LIKE).text
    assert "system(" not in text and "*/ evil" not in text.split("\n", 1)[1]


def test_writer_hoists_into_an_outer_block() -> None:
    w = Writer()
    with w.block("for (int i = 0; i < 4; ++i)", "i"):
        with w.block("for (int j = 0; j < 4; ++j)", "j"):
            with w.at_depth(w.depth_for(["i * 2"])):
                w.line("float hoisted = i;")
            w.line("use(hoisted, j);")
    lines = [ln.strip() for ln in w.render(0).splitlines()]
    assert lines.index("float hoisted = i;") < lines.index("for (int j = 0; j < 4; ++j) {")


def test_dialect_changes_tokens_not_structure() -> None:
    m = ops.softmax(ncd.Axis("x", size=13)).over(ncd.Axis("r", size=7))
    k = unfused(m).kernels[0]
    text = render_kernel(k, CUDA_LIKE).text
    assert text.count('extern "C" __global__ void') == 1 and "__global " not in text
    assert "expf(" in text and "blockIdx.x" in text


@register_op
@attrs.frozen
class Cube(Op):
    kind: ClassVar[str] = "test_cube"
    category: ClassVar[str] = "elementwise"

    def signature(self) -> Signature:
        return ((),), ((),)


def test_a_plugin_rule_extends_the_table() -> None:
    m = ops.prim(Cube()).over(ncd.Axis("r", size=7))
    table = {**CODEGEN_RULES, Cube: lambda g, n, i: f"cube({g.load(n.inputs[0], i)})"}
    assert "cube(in0[i_r])" in render_kernel(unfused(m).kernels[0], CUDA_LIKE, table).text


def test_comments_cannot_be_escaped() -> None:
    op = ops.Softmax(ncd.Axis("x", size=3))
    object.__setattr__(op, "name", "a\nint injected;")  # refused by Op(); codegen must hold anyway
    m = ops.prim(op).over(ncd.Axis("r", size=2))
    text = render_kernel(unfused(m).kernels[0], CUDA_LIKE).text
    assert text.splitlines()[0].startswith("//") and "\nint injected" not in text
