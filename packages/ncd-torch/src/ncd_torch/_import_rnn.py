"""Import rules for torch's recurrent layers (issue 15): ``aten.lstm``, ``aten.gru``,
``aten.rnn_tanh`` and ``aten.rnn_relu``, the single ops ``nn.LSTM``/``nn.GRU``/``nn.RNN``
export to. Each weight becomes a ``Parameter`` under its torch name and in its layout
(``lstm.weight_ih_l0`` ``(4 * hidden, d_in)``), and the layer one ``ncd.rnn.RecurrentBlock``
over them: ``ncd.scan`` unrolled along the sequence, so the length is fixed at import (another
length is another unrolling).

Refused, each by name: an initial state other than zeros, dropout between layers while
training, ``proj_size``, and reading the final states ``(h_n, c_n)``.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import attrs

from ncd._term import Term
from ncd.axis import Axis
from ncd.primitives.library import Parameter
from ncd.rnn import GATES, RecurrentBlock
from ncd_torch._import_rules import import_rule

if TYPE_CHECKING:
    from collections.abc import Callable

    from ncd_torch._capture import Capture

__all__: list[str] = []

_KINDS = {"aten.lstm": "lstm", "aten.gru": "gru", "aten.rnn_tanh": "rnn", "aten.rnn_relu": "rnn"}


@attrs.frozen
class BlockRecord:
    """A recorded op that is a whole term (``_emit`` calls it): made, once the final axes are
    known, from the stand-in axes it was recorded with."""

    make: Callable[[Callable[[Axis], Axis]], Term]
    axes_: tuple[Axis, ...]

    def axes(self) -> tuple[Axis, ...]:
        return self.axes_

    def substitute(self, final: Callable[[Axis], Axis]) -> Term:
        return self.make(final)


@import_rule("aten.lstm", "aten.gru", "aten.rnn_tanh", "aten.rnn_relu")
def _recurrent(c: Capture, node: Any) -> None:
    import torch

    aten = c.aten(node)
    kind = _KINDS[aten]
    args = list(node.args)
    if len(args) != 9 or not isinstance(args[2], list | tuple):
        raise c.unsupported(node, "a packed sequence (pass a padded tensor)")
    x_arg, hx, flat, has_biases, layers, dropout, train, both, first = args
    states = list(hx) if isinstance(hx, list | tuple) else [hx]
    for h0 in states:
        value = c.folded.get(getattr(h0, "name", ""))
        if not isinstance(value, torch.Tensor) or bool(torch.count_nonzero(value)):
            raise c.unsupported(node, "an initial state other than zeros (h0/c0 passed in)")
    if train and float(dropout) > 0 and int(layers) > 1:
        raise c.unsupported(node, "dropout between layers while training (call module.eval())")
    x = c.plain(x_arg)
    dims = list(c.dims[x])
    if any(not isinstance(d, int) for d in dims) or len(dims) not in (2, 3):
        raise c.unsupported(node, "an input that is not (seq, batch, features) or (seq, features)")
    si = 1 if first and len(dims) == 3 else 0
    seq, feat = dims[si], dims[-1]
    c.axes.hint(seq, "seq", 2)
    if len(dims) == 3:
        c.axes.hint(dims[1 - si], "batch", 2)
    n_dirs, n_layers = 2 if both else 1, int(layers)
    per = 4 if has_biases else 2
    if len(flat) != n_layers * n_dirs * per:
        raise c.unsupported(node, "proj_size (an LSTM with a projection of its states)")
    gates = len(GATES[kind])
    hidden = int(c.shape(flat[1])[1])
    q = c.axes.new(gates * hidden, "gates", 1)
    h = c.axes.new(hidden, "hidden", 1)
    k = c.axes.new(hidden, "hidden_prev", 1)
    out = c.axes.new(hidden * n_dirs, "hidden_dirs", 1) if both else h
    leaf = c.leaf(node)
    keys: list[str] = []
    for layer in range(n_layers):
        f = feat if layer == 0 else c.axes.new(hidden * n_dirs, f"hidden_l{layer}", 1)
        for d in range(n_dirs):
            tag = f"_l{layer}{'_reverse' if d else ''}"
            group = flat[(layer * n_dirs + d) * per : (layer * n_dirs + d + 1) * per]
            shapes = [(q, f), (q, k), (q,), (q,)][:per]
            names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"][:per]
            for arg, axes, what in zip(group, shapes, names, strict=True):
                array = c.param(arg)
                op = Parameter(
                    tuple(c.axis(v) for v in axes),
                    "zeros" if what.startswith("bias") else "normal",
                    param=f"{what}{tag}",
                    name=leaf,
                )
                keys.append(c.op(node, op, [], {f"{what}{tag}": array}))
    getitems = [u for u in node.users if u.target is operator.getitem]
    if len(getitems) != len(node.users) or any(int(u.args[1]) and u.users for u in getitems):
        raise c.unsupported(node, "reading the final states (h_n, c_n): only the output is")
    act = "relu" if aten == "aten.rnn_relu" else "tanh"
    s_ax, h_ax, out_ax = c.axis(seq), c.axis(h), c.axis(out)

    def make(final: Callable[[Axis], Axis]) -> Term:
        return RecurrentBlock(
            kind,
            layers=n_layers,
            directions=n_dirs,
            bias=bool(has_biases),
            seq=final(s_ax),
            hidden=final(h_ax),
            out=final(out_ax),
            act=act,
        )

    block = BlockRecord(make, (s_ax, h_ax, out_ax))
    c.op(node, block, [x, *keys])  # type: ignore[arg-type]  # a whole term: _emit calls it
    lead = dims[:-1]
    for u in getitems:
        c.done.add(u.name)
        if int(u.args[1]) == 0:
            c.set(u, [*lead, out], recorded=True)
