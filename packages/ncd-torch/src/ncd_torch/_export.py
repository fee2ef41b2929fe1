"""Export: an ncd model becomes a ``torch.fx.GraphModule``.

The graph's nodes are walked in order; each op is written by its rule (``_rules.py``) after
its inputs are arranged as (loop..., core...), so lifted axes become leading batch dims and
broadcasting, never Python loops. Each planned definition (``_plan.py``) becomes a nested
GraphModule called from its parent, so the module tree follows the block hierarchy and every
parameter is an ``nn.Parameter`` named exactly as ``ncd.init`` names it.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from ncd.axis import Axis
from ncd.dtypes import dtype as to_dtype
from ncd.dtypes import float32
from ncd.errors import CompileError, SizeError
from ncd.graph import Graph, Node, as_graph
from ncd.params import init
from ncd.walk import boundary, rule_for, runs
from ncd_torch._definitions import DEFINITION_RULES
from ncd_torch._dtypes import check_formats, to_tensor, torch_dtype
from ncd_torch._plan import plan_modules, scope_chain
from ncd_torch._rules import TORCH_RULES

__all__ = ["Emitter", "graph_of", "to_module"]


def graph_of(model: Any) -> Graph:
    return as_graph(model, "ncd_torch.to_module")


def _class_name(kind: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", kind) if p) or "Model"


def _get(root: nn.Module, path: str) -> nn.Module:
    """The container at ``path``, created (empty) where missing."""
    mod = root
    for part in path.split(".") if path else ():
        if not hasattr(mod, part):
            mod.add_module(part, Parameters())
        mod = getattr(mod, part)
    return mod


def _put(root: nn.Module, path: str, value: nn.Module | nn.Parameter) -> None:
    parent, _, leaf = path.rpartition(".")
    mod = _get(root, parent)
    if isinstance(value, nn.Parameter):
        mod.register_parameter(leaf, value)
    else:
        setattr(mod, leaf, value)


class Parameters(nn.Module):
    """Holds the learned arrays of one op (``q.weight``, ``q.bias``) under the op's name."""

    def extra_repr(self) -> str:
        return ", ".join(f"{n}: {tuple(p.shape)}" for n, p in self.named_parameters(recurse=False))


class Emitter:
    """Writes the fx graph of one (sub)module: values, sizes, and the calls rules ask for."""

    def __init__(self, graph: Graph, holder: nn.Module, path: str) -> None:
        self.ncd = graph
        self.fx = fx.Graph()
        self.holder = holder
        self.path = path
        self.env: dict[int, fx.Node] = {}
        self.carriers: dict[str, tuple[fx.Node, int]] = {}
        self.lead = 0
        self.loop: tuple[Axis, ...] = ()  # the loop axes of the op being emitted

    # -- values ----------------------------------------------------------------------------------
    def bind(self, value: int, node: fx.Node) -> None:
        self.env[value] = node
        for i, a in enumerate(self.ncd.values[value].axes):
            if self.ncd.size(a) is None:
                self.carriers.setdefault(a.uid, (node, i))

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> fx.Node:
        return self.fx.call_function(fn, args, kwargs)

    def method(self, x: fx.Node, name: str, *args: Any) -> fx.Node:
        return self.fx.call_method(name, (x, *args))

    # -- sizes: ints when bound, read from a tensor at run time when free --------------------------
    def size(self, axis: Axis, *, allow_free: bool = False) -> Any:
        n = self.ncd.size(axis)
        if n is not None:
            return n
        if axis.uid in self.carriers:
            node, dim = self.carriers[axis.uid]
            return self.method(node, "size", dim)
        if allow_free:
            return None
        raise SizeError(
            f"{axis.describe()} is free and no input of {self.path or 'the model'} carries it. "
            "Fix: bind it (model.bind(...)) before exporting."
        )

    def sizes(self, axes: Sequence[Axis], x: fx.Node | None) -> Any:
        if all(self.ncd.size(a) is not None for a in axes):
            return tuple(self.ncd.size(a) for a in axes)
        if x is not None:
            shape = self.call(getattr, x, "shape")
            return self.call(operator.getitem, shape, slice(-len(axes), None))
        return tuple(self.size(a) for a in axes)

    # -- state a rule may add: submodules (dropout, constants) ------------------------------
    def _fresh(self, prefix: str) -> str:
        name, k = prefix, 1
        while hasattr(self.holder, name):
            name, k = f"{prefix}_{k}", k + 1
        return name

    def submodule(self, prefix: str, module: nn.Module, *args: Any) -> fx.Node:
        name = self._fresh(prefix)
        self.holder.add_module(name, module)
        return _call_module(self.fx, name, args)

    # -- one op ----------------------------------------------------------------------------------
    def arrange(self, value: int, loop: Sequence[Axis], core: Sequence[Axis]) -> fx.Node:
        """The value as (loop..., core...), with size-1 dims for loop axes it lacks."""
        x = self.env[value]
        axes = self.ncd.values[value].axes
        present = [a for a in loop if a in axes]
        perm = [axes.index(a) for a in (*present, *core)]
        if perm != list(range(len(perm))):
            x = self.method(x, "permute", *perm)
        for j, a in enumerate(loop):
            if a not in axes:
                x = self.method(x, "unsqueeze", j)
        return x

    def emit(self, node: Node, rules: Mapping[type, Any]) -> None:
        rule = rule_for(rules, node.op)
        if rule is None:
            raise CompileError(
                f"ncd-torch has no rule for op kind {node.op.kind!r} ({node.op.label}, built at "
                f"{node.site or '?'}). Fix: register one with the ncd_register_lowerings hook "
                "(Lowering(target='torch', kind=..., rule=...))."
            )
        xs = [
            self.arrange(v, node.loop, core)
            for v, core in zip(node.inputs, node.core_in, strict=True)
        ]
        self._promote(node, xs)
        ps = {p.name: self.fx.get_attr(self._relative(full)) for full, p in node.params()}
        self.lead, self.loop = len(node.loop), tuple(node.loop)
        outs = rule(node.op, xs, ps, self)
        for v, y in zip(node.outputs, outs, strict=True):
            self.bind(v, y)

    def _promote(self, node: Node, xs: list[fx.Node]) -> None:
        """Each input as ``Op.promotions`` says, as ``ncd.reference`` converts it: a bool where
        the op takes a float as 0.0 / 1.0, an integer where it gives a float, in the op's float
        format (float32 when it has none); a bool beside integers as 0 / 1 of the integer
        (torch would keep ``bool + bool`` a bool, and refuse a bool in an einsum)."""
        dts = tuple(self.ncd.values[v].dtype for v in node.inputs)
        for k, to in enumerate(node.op.promotions(dts)):
            if to is not None:
                fmt = (node.op.float_format(dts) or float32) if to == "float" else to_dtype(to)
                xs[k] = self.method(xs[k], "to", torch_dtype(fmt, f"{node.op.label}'s input"))

    def _relative(self, name: str) -> str:
        return name[len(self.path) + 1 :] if self.path else name


class _Builder:
    """Builds the module tree bottom-up: children first, each a GraphModule in its holder."""

    def __init__(
        self, graph: Graph, root: nn.Module, rules: Mapping[type, Any], fuse: bool = True
    ) -> None:
        self.graph = graph
        self.fuse = fuse
        self.root = root
        self.rules = rules
        self.plan = plan_modules(graph)

    def _child(self, scope: int, node: Node) -> int | None:
        """The planned scope directly below ``scope`` that holds ``node`` (None: ``scope`` does)."""
        found = None
        for s in scope_chain(self.graph, node.scope):
            if s == scope:
                return found
            if s in self.plan:
                found = s
        return found if scope == 0 else None

    def build(self, scope: int, idx: list[int], ins: list[int], outs: list[int]) -> fx.GraphModule:
        g, path = self.graph, self.plan[scope]
        holder = _get(self.root, path)
        em = Emitter(g, holder, path)
        for k, v in enumerate(ins):
            em.bind(v, em.fx.placeholder("x" if len(ins) == 1 else f"x{k}"))
        for child, run in runs(g, idx, lambda node: self._child(scope, node)):
            if child is None:
                for i in run:
                    em.emit(g.nodes[i], self.rules)
            else:
                self._call_child(em, child, run)
        results = [em.env[v] for v in outs]
        em.fx.output(results[0] if len(results) == 1 else tuple(results))
        module = fx.GraphModule(holder, em.fx, class_name=_class_name(g.scopes[scope].name))
        for name, block in holder.named_children():  # blocks the code never calls
            if not hasattr(module, name):
                module.add_module(name, block)
        return module

    def _fused(self, scope: int, run: list[int], ins: list[int], outs: list[int]) -> Any:
        """The block as one fused call when a definition rule matches it (else None)."""
        rule = DEFINITION_RULES.get(self.graph.scopes[scope].name) if self.fuse else None
        if rule is None:
            return None
        path = self.plan[scope]
        em = Emitter(self.graph, _get(self.root, path), path)
        for k, v in enumerate(ins):
            em.bind(v, em.fx.placeholder(f"x{k}"))
        results = rule(em, [self.graph.nodes[i] for i in run], ins, outs)
        if results is None:
            return None
        em.fx.output(results[0] if len(results) == 1 else tuple(results))
        return fx.GraphModule(em.holder, em.fx, _class_name(self.graph.scopes[scope].name))

    def _call_child(self, em: Emitter, child: int, run: list[int]) -> None:
        reads, writes = boundary(self.graph, run)
        ins, outs = list(reads), list(writes)
        module = self._fused(child, run, ins, outs) or self.build(child, run, ins, outs)
        rel = self.plan[child][len(em.path) + 1 :] if em.path else self.plan[child]
        _put(em.holder, rel, module)
        if not outs:
            return  # nothing reads the block: it keeps its parameters but is never called
        call = _call_module(em.fx, rel, tuple(em.env[v] for v in ins))
        if len(outs) == 1:
            em.bind(outs[0], call)
        else:
            for k, v in enumerate(outs):
                em.bind(v, em.call(operator.getitem, call, k))


def _call_module(g: fx.Graph, target: str, args: tuple[Any, ...]) -> fx.Node:
    """``g.call_module``, except that a submodule named ``self`` (BERT's attention) gets a
    result variable that does not shadow the module's own ``self`` in the generated forward."""
    name = "self_" if target == "self" else None
    return g.create_node("call_module", target, args, {}, name=name)


def _lowering_rules() -> dict[type, Any]:
    from ncd.op import OP_KINDS
    from ncd.plugins import registry

    rules: dict[type, Any] = dict(TORCH_RULES)
    for kind, lowering in registry().lowerings_for("torch").items():
        if kind in OP_KINDS:
            rules[OP_KINDS[kind]] = lowering.rule
    return rules


def to_module(
    model: Any,
    *,
    params: Mapping[str, Any] | None = None,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    fuse: bool = True,
) -> fx.GraphModule:
    """A ``torch.nn.Module`` (a ``torch.fx.GraphModule``) computing ``model``.

    Parameters are ``nn.Parameter``s named as ``ncd.init`` names them, filled from ``params``
    (``{name: array}``) or from ``ncd.init(model, seed)``. Sizes that no parameter fixes may stay
    free: they are read from the input shapes at run time. The module is returned in eval mode
    (dropout off), ncd's default semantics; call ``.train()`` to switch dropout on.
    ``fuse=False`` writes every block op by op (no definition rules, see ``_definitions.py``).
    Each parameter is in its own format (float32, or that of a ``.cast`` model: bfloat16,
    float16, float64); ``dtype`` converts every parameter to one torch dtype instead. A float8
    model is a ``DTypeError`` (torch has no float8 arithmetic).
    """
    from ncd_torch._import import Imported, origin_of

    if isinstance(model, Imported):  # its params, and the original checkpoint loads as it is
        return model.to_module(params=params, dtype=dtype, seed=seed, fuse=fuse)  # type: ignore[no-any-return]
    origin = origin_of(model)
    if origin is not None:  # a model from_torch returned: its original checkpoint loads too
        values = dict(init(graph_of(model), seed=seed)) if params is None else dict(params)
        return origin.to_module(params=values, dtype=dtype, seed=seed, fuse=fuse)  # type: ignore[no-any-return]
    return plain_module(model, params=params, dtype=dtype, seed=seed, fuse=fuse)


def plain_module(
    model: Any,
    *,
    params: Mapping[str, Any] | None = None,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    fuse: bool = True,
) -> fx.GraphModule:
    """``to_module`` of the ncd model itself (whatever it was imported from)."""
    graph = graph_of(model)
    check_formats(graph)
    root = nn.Module()
    values = dict(init(graph, seed=seed)) if params is None else dict(params)
    wanted = graph.params()
    if params is not None and set(values) != set(wanted):
        from ncd.errors import ParameterError

        missing, extra = sorted(set(wanted) - set(values)), sorted(set(values) - set(wanted))
        raise ParameterError(
            f"params do not match the model: missing {missing[:8]}, unexpected "
            f"{extra[:8]}. Fix: pass ncd.init(model) or a state dict of it."
        )
    for name in wanted:
        array = values[name]
        tensor = (
            array.detach().clone()
            if isinstance(array, torch.Tensor)
            else to_tensor(np.array(array))
        )
        target = dtype if dtype is not None else torch_dtype(wanted[name].dtype)
        _put(root, name, nn.Parameter(tensor.to(target)))
    builder = _Builder(graph, root, _lowering_rules(), fuse)
    module = builder.build(
        0, list(range(len(graph.nodes))), list(graph.inputs), list(graph.outputs)
    )
    return module.eval()
