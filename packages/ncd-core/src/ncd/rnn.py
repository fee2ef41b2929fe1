"""Recurrent layers as scans (issue 15): ``rnn``, ``gru`` and ``lstm`` as torch's ``nn.RNN``,
``nn.GRU`` and ``nn.LSTM`` (multi-layer, bidirectional, batch-first), and ``rnn_lm``, a
language model of an embedding, recurrent layers and a linear head.

Each direction of each layer reads the whole sequence through its input matrix once (one
einsum over every position, as cuDNN does), then ``ncd.scan`` walks the positions with a cell
that closes over the recurrent matrices, so the parameters exist once however long the
sequence. The parameters carry torch's names and layouts (``weight_ih_l0`` ``[gates d_in]``
with ``|gates| = 4 * hidden`` for the LSTM in its order ``i f g o``, ``r z n`` for the GRU;
``bias_hh_l1_reverse``...), so a torch ``state_dict`` loads as it is
(``ncd_torch.load_state_dict``); each gate is a slice of ``gates`` renamed onto ``hidden``.
``ncd.nn`` re-exports these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ncd import ops
from ncd._lower import Builder, Ref
from ncd._term import Term
from ncd._trace import Tensor, call_on, trace
from ncd.axis import ArrayType, Axis, show
from ncd.axis import axis_arg as _ax
from ncd.errors import DefinitionError, SizeError
from ncd.primitives.indexing import Concat
from ncd.primitives.library import Constant, Parameter, Reduce, View
from ncd.scan import scan

__all__ = [
    "STATES",
    "RecurrentBlock",
    "gru",
    "lstm",
    "recurrent",
    "recurrent_states",
    "rnn",
    "rnn_lm",
]

AxisArg = Axis | int | str | None

#: gates per kind, in torch's order along the ``gates`` axis
GATES = {"rnn": ("h",), "gru": ("r", "z", "n"), "lstm": ("i", "f", "g", "o")}
#: the most layers a recurrent stack builds (each is unrolled along the sequence)
MAX_LAYERS = 64


def rnn(
    d_in: AxisArg = "d_in",
    hidden: AxisArg = "hidden",
    *,
    layers: int = 1,
    nonlinearity: str = "tanh",
    bias: bool = True,
    bidirectional: bool = False,
    batch_first: bool = False,
    seq: AxisArg = "seq",
    batch: AxisArg = None,
    label: str = "rnn",
) -> Term:
    """torch's ``nn.RNN``: ``h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` from a zero
    state, ``act`` tanh or relu. Input ``[seq d_in]`` (``[seq batch d_in]`` given ``batch``,
    ``[batch seq d_in]`` with ``batch_first``); output every position's last-layer state,
    ``[seq hidden]`` (both directions joined on ``hidden_dirs`` when bidirectional)."""
    if nonlinearity not in ("tanh", "relu"):
        raise DefinitionError(
            f"rnn: nonlinearity must be 'tanh' or 'relu', got {show(nonlinearity)}. Fix: pass "
            "one (torch's choices)."
        )
    return _stack("rnn", locals(), nonlinearity)


def gru(
    d_in: AxisArg = "d_in",
    hidden: AxisArg = "hidden",
    *,
    layers: int = 1,
    bias: bool = True,
    bidirectional: bool = False,
    batch_first: bool = False,
    seq: AxisArg = "seq",
    batch: AxisArg = None,
    label: str = "gru",
) -> Term:
    """torch's ``nn.GRU``: ``r, z = sigmoid(W_i x + b_i + W_h h + b_h)``, ``n = tanh(W_in x +
    b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``; shapes as ``rnn``."""
    return _stack("gru", locals(), "tanh")


def lstm(
    d_in: AxisArg = "d_in",
    hidden: AxisArg = "hidden",
    *,
    layers: int = 1,
    bias: bool = True,
    bidirectional: bool = False,
    batch_first: bool = False,
    seq: AxisArg = "seq",
    batch: AxisArg = None,
    label: str = "lstm",
) -> Term:
    """torch's ``nn.LSTM``: gates ``i f g o`` from ``W_ih x + b_ih + W_hh h + b_hh``,
    ``c' = sigmoid(f) c + sigmoid(i) tanh(g)``, ``h' = sigmoid(o) tanh(c')`` from zero states;
    shapes as ``rnn``."""
    return _stack("lstm", locals(), "tanh")


def rnn_lm(
    vocab: AxisArg = "vocab",
    d_model: AxisArg = "d_model",
    hidden: AxisArg = "hidden",
    *,
    cell: str = "lstm",
    layers: int = 2,
    seq: AxisArg = "seq",
    label: str = "lm",
) -> Term:
    """A recurrent language model: token ids ``[seq]`` -> ``embed`` -> ``layers`` of ``cell``
    (``lstm``, ``gru`` or ``rnn``, under the name ``rnn``) -> ``head`` (a linear map onto the
    vocabulary): logits ``[seq vocab]``, as the PyTorch word-language-model example."""
    kinds = {"lstm": lstm, "gru": gru, "rnn": rnn}
    if cell not in kinds:
        raise DefinitionError(
            f"rnn_lm: cell must be one of {', '.join(kinds)}, got {show(cell)}. Fix: pass one."
        )
    v, d, h, s = (
        _ax("vocab", vocab),
        _ax("d_model", d_model),
        _ax("hidden", hidden),
        _ax("seq", seq),
    )
    body = kinds[cell](d, h, layers=layers, seq=s, label="rnn")

    @trace(inputs=[ArrayType((s,), "int64")], name="rnn_lm", label=label)
    def model(tokens: Tensor) -> Tensor:
        x = ops.embedding(v, d, name="embed")(tokens)
        y: Tensor = ops.linear(h, v, name="head")(body(x))
        return y

    return model


# -- the stack -----------------------------------------------------------------------------------
def _flag(kind: str, field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise DefinitionError(f"{kind}: {field} must be True or False, got {show(value)}.")
    return value


def _stack(kind: str, args: dict[str, Any], act: str) -> Term:
    layers = args["layers"]
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= MAX_LAYERS:
        raise DefinitionError(
            f"{kind}: layers must be an int in [1, {MAX_LAYERS}], got {show(layers)}. Fix: pass "
            "e.g. layers=2."
        )
    bias = _flag(kind, "bias", args["bias"])
    both = _flag(kind, "bidirectional", args["bidirectional"])
    first = _flag(kind, "batch_first", args["batch_first"])
    di, h, s = _ax("d_in", args["d_in"]), _ax("hidden", args["hidden"]), _ax("seq", args["seq"])
    bt = None if args["batch"] is None else _ax("batch", args["batch"])
    if first and bt is None:
        raise DefinitionError(
            f"{kind}: batch_first=True needs the batch axis it puts first. Fix: pass "
            f"batch=ncd.Axis('batch') (or leave batch_first out and lift the model over a batch)."
        )
    if len({di, h, s, *(() if bt is None else (bt,))}) < 3 + (bt is not None):
        raise DefinitionError(
            f"{kind}: d_in, hidden, seq and batch must be different axes, got "
            f"{[a.describe() for a in (di, h, s)]}. Fix: name each its own."
        )
    if not isinstance(h.size, int):
        raise SizeError(
            f"{kind}: the hidden axis {h.describe()} needs its size when the model is built (each "
            f"gate is a slice of {len(GATES[kind])} x hidden). Fix: pass hidden=512 or a sized "
            "ncd.Axis."
        )
    lead = () if bt is None else ((bt, s) if first else (s, bt))
    dirs = ("", "_reverse") if both else ("",)
    q = Axis("gates", size=len(GATES[kind]) * h.size)
    k = Axis(f"{h.name}_prev", size=h.size)
    joined = Axis(f"{h.name}_dirs", size=None if h.size is None else 2 * h.size)
    width = joined if both else h
    feats = [di] + [
        width if both else Axis(f"{h.name}_l{layer}", size=h.size) for layer in range(1, layers)
    ]

    def param(axes: tuple[Axis, ...], what: str, init: str = "normal") -> Tensor:
        return ops.prim(Parameter(axes, init, param=what))()  # type: ignore[no-any-return]

    @trace(inputs=[ArrayType((*lead, di) if lead else (s, di))], name=kind, label=args["label"])
    def body(x: Tensor) -> Tensor:
        weights = []
        for layer, f in enumerate(feats):
            per: list[list[Tensor]] = []
            for sfx in dirs:
                tag = f"_l{layer}{sfx}"
                w = [param((q, f), f"weight_ih{tag}"), param((q, k), f"weight_hh{tag}")]
                if bias:
                    w += [param((q,), f"bias_ih{tag}", "zeros")]
                    w += [param((q,), f"bias_hh{tag}", "zeros")]
                per.append(w)
            weights.append(per)
        y = recurrent(kind, x, weights, seq=s, hidden=h, out=width, act=act)
        return _order(y, lead) if first else y

    return body


Weights = Sequence[Sequence[Sequence[Tensor]]]


class RecurrentBlock(Term):
    """``recurrent`` as a term over ``(x, *weights)``, the weights flattened layer by layer and
    direction by direction (``w_ih, w_hh[, b_ih, b_hh]`` each), for a front end that holds them
    as parameters of its own (``from_torch`` of ``nn.LSTM``, whose names they keep).

    ``stack`` (an axis of ``layers * directions`` entries): the term also returns the final
    states after the output (``h_n``, and ``c_n`` for the LSTM, each ``[stack .. hidden]``,
    torch's ``(num_layers * num_directions, batch, hidden)``); with ``initial`` it takes the
    initial states in that layout after ``x`` (``h_0``, ``c_0``) instead of starting from
    zeros, as torch's layers do."""

    __slots__ = (
        "act",
        "bias",
        "directions",
        "hidden",
        "initial",
        "kind",
        "layers",
        "out",
        "seq",
        "stack",
    )

    def __init__(
        self,
        kind: str,
        *,
        layers: int,
        directions: int,
        bias: bool,
        seq: Axis,
        hidden: Axis,
        out: Axis,
        act: str = "tanh",
        stack: Axis | None = None,
        initial: bool = False,
    ) -> None:
        if initial and stack is None:
            raise DefinitionError(
                f"{kind}: initial states need the stack axis they are laid out on (layers x "
                "directions). Fix: pass stack=ncd.Axis('layers', size=layers * directions)."
            )
        per = 4 if bias else 2
        states = len(STATES[kind])
        n_in = 1 + (states if initial else 0) + layers * directions * per
        super().__init__(n_in, 1 + (0 if stack is None else states))
        self.kind, self.layers, self.directions, self.bias = kind, layers, directions, bias
        self.seq, self.hidden, self.out, self.act = seq, hidden, out, act
        self.stack, self.initial = stack, initial

    def __repr__(self) -> str:
        return f"RecurrentBlock({self.kind!r}, layers={self.layers}, directions={self.directions})"

    def lower(self, b: Builder, ins: Sequence[Ref]) -> list[Ref]:
        return call_on(b, self._stack, ins, f"{self!r}")

    def _stack(self, x: Tensor, *rest: Tensor) -> Tensor | tuple[Tensor, ...]:
        n = len(STATES[self.kind]) if self.initial else 0
        initial, flat = rest[:n], rest[n:]
        per = 4 if self.bias else 2
        groups = [list(flat[i : i + per]) for i in range(0, len(flat), per)]
        weights = [groups[i : i + self.directions] for i in range(0, len(groups), self.directions)]
        y, finals = recurrent_states(
            self.kind,
            x,
            weights,
            seq=self.seq,
            hidden=self.hidden,
            out=self.out,
            act=self.act,
            initial=initial if self.initial else None,
            stack=self.stack,
        )
        return (y, *finals) if self.stack is not None else y


#: the states each kind carries, in torch's order (``(h_n, c_n)`` for the LSTM)
STATES = {"rnn": ("h",), "gru": ("h",), "lstm": ("h", "c")}


def recurrent(
    kind: str, x: Tensor, weights: Weights, *, seq: Axis, hidden: Axis, out: Axis, act: str
) -> Tensor:
    """A stack of recurrent layers over ``x [.. seq .. feat]`` inside a trace: ``weights[l][d]``
    holds layer ``l``'s direction ``d`` (forward, then backward) in torch's layout: ``(w_ih
    [gates feat], w_hh [gates hidden_prev])`` and, with biases, ``(b_ih, b_hh) [gates]``, where
    ``gates`` runs over torch's gates (``GATES[kind]``) of ``hidden`` units each. The result is
    every position's last-layer state ``[seq .. hidden]``, or both directions joined on ``out``
    (the next layer's input axis reads a layer's joined states directly). Zero initial states."""
    y, _ = recurrent_states(kind, x, weights, seq=seq, hidden=hidden, out=out, act=act)
    return y


def recurrent_states(
    kind: str,
    x: Tensor,
    weights: Weights,
    *,
    seq: Axis,
    hidden: Axis,
    out: Axis,
    act: str,
    initial: Sequence[Tensor] | None = None,
    stack: Axis | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """``recurrent``, from the initial states ``initial`` (``h_0`` and, for the LSTM, ``c_0``,
    each ``[stack .. hidden]`` with ``|stack| = layers * directions``, entry ``l * directions +
    d`` layer ``l``'s direction ``d``: torch's layout), or zeros; also returns the final states
    in the same layout when ``stack`` is given (else none)."""
    have = weights[0][0][0].axes[1]  # the axis x holds its features on
    h = hidden
    n_dirs = len(weights[0])
    kept: list[list[Tensor]] = [[] for _ in STATES[kind]]
    for layer, per in enumerate(weights):
        feat = per[0][0].axes[1]
        if have != feat:  # the last layer's states as this layer's input
            x = ops.rename(have, feat)(x)
        ys = []
        for d, w in enumerate(per):
            first = None
            if initial is not None and stack is not None:
                first = [_entry(v, stack, layer * n_dirs + d) for v in initial]
            y, finals = _direction(kind, x, w, seq, h, bool(d), act, first)
            ys.append(y)
            for k, v in enumerate(finals):
                kept[k].append(v)
        if len(ys) == 1:
            x, have = ys[0], h
            continue
        have = weights[layer + 1][0][0].axes[1] if layer + 1 < len(weights) else out
        fwd, bwd = Axis(f"{h.name}_fwd", size=h.size), Axis(f"{h.name}_bwd", size=h.size)
        join = ops.prim(Concat((fwd, bwd), have, name="directions"))
        x = join(ops.rename(h, fwd)(ys[0]), ops.rename(h, bwd)(ys[1]))
    if have != out:
        x = ops.rename(have, out)(x)
    if stack is None:
        return x, []
    joined = [
        ops.stack(stack, len(vs), name=f"{name}_n")(*vs)
        for name, vs in zip(STATES[kind], kept, strict=True)
    ]
    return x, joined


def _entry(v: Tensor, stack: Axis, i: int) -> Tensor:
    """Entry ``i`` of ``v`` along ``stack``, the axis gone (a one-wide slice summed away)."""
    one = Axis(f"{stack.name}_{i}", size=1)
    piece: Tensor = ops.slice(stack, one, start=i)(v)
    out: Tensor = ops.prim(Reduce("sum", (one,)))(piece)
    return out


def _direction(
    kind: str,
    x: Tensor,
    w: Sequence[Tensor],
    s: Axis,
    h: Axis,
    reverse: bool,
    act: str,
    initial: Sequence[Tensor] | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """One direction of one layer over ``x [.. s .. feat]``, from the states ``initial`` (or
    zeros): every position's state ``[s .. h]``, and the final states. The input matrix reads
    the whole sequence at once, outside the loop; each step is one product of the recurrent
    matrix with the state (every gate at once: the tiled matmul) and the gate arithmetic on
    slices of it, each gate's slice renamed onto ``h``."""
    w_ih, w_hh, *biases = w
    q, feat = w_ih.axes
    k = w_hh.axes[1]
    n = h.size
    assert isinstance(n, int)  # sized by the builders (nn.lstm) and the importer
    gx: Tensor = ops.einsum("f, q f -> q", f=feat, q=q)(x, w_ih)
    b_hh = None
    if biases:
        b_ih, b_hh = biases
        gx = gx + b_ih
        if kind != "gru":  # the GRU's n gate scales W_hn h + b_hn by r: added in the loop
            gx = gx + b_hh
            b_hh = None
    parts = [Axis(f"{h.name}_{name}", size=h.size) for name in GATES[kind]]

    def gate(v: Tensor, j: int) -> Tensor:
        piece: Tensor = ops.slice(q, parts[j], start=j * n)(v)
        return ops.rename(parts[j], h)(piece)  # type: ignore[no-any-return]

    def mv(state: Tensor) -> Tensor:
        out: Tensor = ops.einsum("q k, k -> q", q=q, k=k)(w_hh, prev(state))
        return out if b_hh is None else out + b_hh

    # the state renamed once per step onto ``k``, the axis the recurrent matrix contracts
    sig, tanh, prev = ops.unary("sigmoid"), ops.unary("tanh"), ops.rename(h, k)
    cell: Callable[..., Any]
    if kind == "rnn":

        def cell(state: Tensor, xt: Tensor) -> tuple[Tensor, Tensor]:
            new: Tensor = ops.unary(act)(gate(xt + mv(state), 0))
            return new, new

    elif kind == "gru":

        def cell(state: Tensor, xt: Tensor) -> tuple[Tensor, Tensor]:
            gh = mv(state)
            r, z = sig(gate(xt, 0) + gate(gh, 0)), sig(gate(xt, 1) + gate(gh, 1))
            cand = tanh(gate(xt, 2) + r * gate(gh, 2))
            new: Tensor = (1.0 - z) * cand + z * state
            return new, new

    else:

        def cell(state: Tensor, c: Tensor, xt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            pre = xt + mv(state)
            i, f, o = sig(gate(pre, 0)), sig(gate(pre, 1)), sig(gate(pre, 3))
            c2: Tensor = f * c + i * tanh(gate(pre, 2))
            new: Tensor = o * tanh(c2)
            return new, c2, new

    others = [a for a in x.axes if a not in (s, feat)]
    fmt = w_hh.type.dtype if w_hh.type is not None else None
    if initial is None:
        zero = ops.prim(Constant(0.0, (*others, h), dtype=fmt, name="zero_state"))
        initial = [zero() for _ in STATES[kind]]
    run = scan(
        cell,
        over=s,
        states=len(initial),
        reverse=reverse,
        name=f"{kind}_reverse" if reverse else kind,
    )
    *finals, y = run(*initial, gx)
    return y, list(finals)


def _order(x: Tensor, axes: Sequence[Axis]) -> Tensor:
    """``x`` with ``axes`` leading, in that order (a view)."""
    have = x.axes
    want = (*axes, *(a for a in have if a not in axes))
    if tuple(have) == want:
        return x
    view = View(have, want, tuple((a,) for a in have), tuple((a,) for a in want), name="order")
    out: Tensor = ops.prim(view)(x)
    return out
