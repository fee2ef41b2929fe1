"""Import rules for torch's recurrent layers (issue 15): ``aten.lstm``, ``aten.gru``,
``aten.rnn_tanh`` and ``aten.rnn_relu``, the single ops ``nn.LSTM``/``nn.GRU``/``nn.RNN``
export to. Each weight becomes a ``Parameter`` under its torch name and in its layout
(``lstm.weight_ih_l0`` ``(4 * hidden, d_in)``), and the layer one ``ncd.rnn.RecurrentBlock``
over them: ``ncd.scan`` unrolled along the sequence, so the length is fixed at import (another
length is another unrolling).

The initial states ``(h_0, c_0)`` may be zeros (folded away) or values of the model (an
input, a computed tensor) in torch's layout ``(layers * directions, batch, hidden)``; the final
states ``(h_n, c_n)`` are read in the same layout (``RecurrentBlock(stack=...)``); a constant
initial state of one value throughout (``torch.ones``, a fill) is an ``ops.constant``. Refused,
each by name: a constant initial state of several values, dropout between layers while
training, and ``proj_size``.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import attrs

from ncd._term import Term
from ncd.axis import Axis
from ncd.primitives.library import Constant, Parameter
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


@attrs.frozen
class PickRecord:
    """A recorded op picking output ``k`` of the whole-term block recorded before it (the
    layer's output, ``h_n`` or ``c_n``): ``_emit`` calls it on the block's tuple of values."""

    k: int

    def axes(self) -> tuple[Axis, ...]:
        return ()

    def substitute(self, final: Callable[[Axis], Axis]) -> Callable[[Any], Any]:
        return operator.itemgetter(self.k)


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
    folded = [c.folded.get(getattr(h0, "name", "")) for h0 in states]
    zeros = all(isinstance(v, torch.Tensor) and not torch.count_nonzero(v) for v in folded)
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
    if len(getitems) != len(node.users):
        raise c.unsupported(node, "a use of the results other than indexing them")
    finals = any(int(u.args[1]) and u.users for u in getitems)
    act = "relu" if aten == "aten.rnn_relu" else "tanh"
    s_ax, h_ax, out_ax = c.axis(seq), c.axis(h), c.axis(out)
    batch = [dims[1 - si]] if len(dims) == 3 else []
    stack = c.axes.new(n_layers * n_dirs, "layers", 2) if finals or not zeros else None
    firsts = [] if zeros else [_state(c, node, v, stack, batch, h) for v in states]
    stack_ax = None if stack is None else c.axis(stack)

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
            stack=None if stack_ax is None else final(stack_ax),
            initial=not zeros,
        )

    axes = (s_ax, h_ax, out_ax) if stack_ax is None else (s_ax, h_ax, out_ax, stack_ax)
    block = c.op(node, BlockRecord(make, axes), [x, *firsts, *keys])  # type: ignore[arg-type]
    lead = dims[:-1]
    for u in getitems:
        c.done.add(u.name)
        k = int(u.args[1])
        if stack_ax is None:  # one output: the block's value is the layer's output
            if k == 0:
                c.set(u, [*lead, out], recorded=True)
            continue
        if k and not u.users:
            continue
        c.op(u, PickRecord(k), [block], names=[])  # type: ignore[arg-type]
        c.set(u, [*lead, out] if k == 0 else [stack, *batch, h], recorded=True)


def _state(c: Capture, node: Any, arg: Any, stack: Any, batch: list[Any], h: Any) -> str:
    """An initial state value ``(layers * directions, [batch,] hidden)``, its dims met with the
    layer's; a constant one (``torch.ones(...)``, a fill) is an ``ops.constant`` over them."""
    value = c.folded.get(getattr(arg, "name", ""))
    if value is not None:
        if value.numel() and bool((value != value.flatten()[0]).any()):
            raise c.unsupported(
                node, "an initial state that is a constant tensor of several values"
            )
        if tuple(value.shape) != tuple(c.axes.size[v] for v in (stack, *batch, h)):
            raise c.unsupported(node, "an initial state not laid out (layers, batch, hidden)")
        axes = tuple(c.axis(v) for v in (stack, *batch, h))
        fill = float(value.flatten()[0]) if value.numel() else 0.0
        key = c.op(node, Constant(fill, axes, name="initial_state"), [], names=[])
        c.dims[key] = [stack, *batch, h]
        return key
    key = c.plain(arg)
    dims = c.dims[key]
    if len(dims) != 2 + len(batch) or any(not isinstance(d, int) for d in dims):
        raise c.unsupported(node, "an initial state not laid out (layers, batch, hidden)")
    for mine, theirs in zip(dims, [stack, *batch, h], strict=True):
        if c.axes.size[mine] != c.axes.size[theirs]:
            raise c.unsupported(node, "an initial state of another size than the layer's")
        c.axes.union(mine, theirs)
    return key
