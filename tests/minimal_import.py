"""Run with only ncd-core installed: ncd imports, works, and loads no heavy library."""

import sys

import numpy as np

import ncd
from ncd import ops

att = (ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")).bind(
    q=2, x=3, d=4, v=5
)
out = ncd.run(att, np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 5)))
assert out.shape == (2, 5)
ncd.plugins.registry()  # loading the plugin host must stay light too
heavy = [
    m
    for m in ("torch", "pyopencl", "pycuda", "graphviz", "sympy", "matplotlib")
    if m in sys.modules
]
assert not heavy, f"import ncd loaded heavy modules: {heavy}"
print("minimal: ok, plugins:", [p.name for p in ncd.plugins.registry().plugins])
