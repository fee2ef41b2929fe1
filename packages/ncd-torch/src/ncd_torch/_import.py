"""Import: a PyTorch module becomes an ncd model with named axes and named blocks.

The module is captured with ``torch.export`` (an ATen graph carrying each node's module path
and source line) and read by ``Capture`` (``_capture.py``) into ncd op records over axis
variables. Once every variable's identity and name is settled, the records are replayed
through ``ncd.trace``; each user-defined submodule becomes a named definition (``blocks.0``,
``attn``...) whose parameters keep PyTorch's names where the shapes allow.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ncd import ops, serialize, trace
from ncd._term import Term
from ncd.axis import ArrayType
from ncd.errors import NcdError
from ncd.op import Op
from ncd_torch._capture import Capture, Record, _snake
from ncd_torch._dtypes import to_numpy
from ncd_torch._import_rules import TorchImportError

__all__ = ["Imported", "from_torch", "origin_of"]


_SPEC = re.compile(r"^(?P<base>.*?)(?P<t>\.T)?(?:\[(?P<a>\d+)(?::(?P<b>\d+))?\])?$")


@attrs.frozen
class Imported:
    """What ``from_torch`` returns; unpacks as ``model, params = from_torch(...)``."""

    model: Any
    params: dict[str, np.ndarray]
    torch_names: dict[str, str]  # ncd parameter name -> PyTorch state_dict name
    #: the original module's state_dict keys and shapes (what ``params_from`` reads)
    torch_shapes: dict[str, tuple[int, ...]] = attrs.field(factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.params))

    def params_from(self, state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """ncd parameters from a state dict of the original module, read as ``torch_names``
        says: ``.T`` a transpose (``Conv1D``), ``[a:b]`` rows (a split or positions), ``[k]``
        one row, then the ncd shape (heads split off)."""
        out: dict[str, np.ndarray] = {}
        for name, spec in self.torch_names.items():
            m = _SPEC.match(spec)
            assert m is not None  # the pattern matches every string
            value = state_dict[m["base"]]
            array = np.asarray(to_numpy(value) if hasattr(value, "detach") else value)
            if m["t"]:
                array = array.T
            if m["a"] is not None:
                array = array[int(m["a"])] if m["b"] is None else array[int(m["a"]) : int(m["b"])]
            out[name] = np.ascontiguousarray(array.reshape(self.params[name].shape))
        return out

    def to_module(self, **options: Any) -> Any:
        """``to_module(model, params=params)`` whose ``load_state_dict`` also takes the original
        module's state dict as it is (same keys and shapes as ``torch_shapes``): it is converted
        with ``params_from`` and the keys ncd has no parameter for (buffers, the second name of
        a tied weight) are dropped. A state dict of the ncd module itself loads as usual."""
        from ncd_torch._export import plain_module

        if options.get("params") is None:
            options["params"] = self.params
        module = plain_module(self.model, **options)
        own = {k: tuple(v.shape) for k, v in module.state_dict().items()}

        def convert(state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
            keys = {k[len(prefix) :]: k for k in state_dict if k.startswith(prefix)}
            shapes = {k: tuple(getattr(state_dict[full], "shape", ())) for k, full in keys.items()}
            if shapes == own or shapes != self.torch_shapes:
                return  # ncd's own form (or something else: let torch report it)
            import torch

            converted = self.params_from({k: state_dict[full] for k, full in keys.items()})
            for full in keys.values():
                del state_dict[full]
            for k, array in converted.items():
                state_dict[prefix + k] = torch.from_numpy(array)

        module._register_load_state_dict_pre_hook(convert)
        return module


def _emit(
    c: Capture,
    recs: list[Record],
    depth: int,
    env: dict[str, Any],
    later: dict[str, int],
    start: int,
) -> None:
    pos = 0
    while pos < len(recs):
        rec = recs[pos]
        if len(rec.stack) <= depth:
            op = rec.op.substitute(c.final)
            # a whole block or a pick of its outputs (_import_rnn), else one op
            term = op if isinstance(op, Term) or not isinstance(op, Op) else ops.prim(op)
            env[rec.output] = term(*(env[k] for k in rec.inputs))
            pos += 1
            continue
        scope = rec.stack[depth]
        end = pos
        while end < len(recs) and len(recs[end].stack) > depth and recs[end].stack[depth] == scope:
            end += 1
        group = recs[pos:end]
        made = {r.output for r in group}
        ins = list(dict.fromkeys(k for r in group for k in r.inputs if k not in made))
        outs = [r.output for r in group if later.get(r.output, -1) >= start + end]
        first = start + pos
        if not outs:  # a block whose results nothing reads (BERT's pooler): not emitted
            c.unread.update(r.output for r in group)
            pos = end
            continue

        def body(
            *ts: Any,
            group: list[Record] = group,
            ins: list[str] = ins,
            outs: list[str] = outs,
            first: int = first,
        ) -> Any:
            inner = dict(zip(ins, ts, strict=True))
            _emit(c, group, depth + 1, inner, later, first)
            return tuple(inner[k] for k in outs) if len(outs) > 1 else inner[outs[0]]

        types = [ArrayType(env[k].axes, env[k].type.dtype) for k in ins]
        sub = trace(inputs=types, name=scope[0], label=scope[1])(body)
        result = sub(*(env[k] for k in ins))
        env.update(zip(outs, result if len(outs) > 1 else (result,), strict=True))
        pos = end


def from_torch(module: Any, example_inputs: Sequence[Any], *, free_sizes: bool = True) -> Imported:
    """Capture ``module`` on ``example_inputs`` and rebuild it as an ncd model.

    Returns ``Imported(model, params, torch_names)`` (it unpacks as ``model, params``):
    parameters are named by the block hierarchy, and ``ncd.run(model, *inputs, params=params)``
    equals ``module(*inputs)``. With ``free_sizes`` (the default) the batch and sequence sizes
    stay free where the module imports to the same graph at another batch and length and no
    parameter fixes them (a learned positional table fixes the length); otherwise, and with
    ``free_sizes=False``, every size is the example's.
    """
    inputs = tuple(example_inputs)
    c = _read(module, inputs)
    model = _rebuild(c, type(module).__name__)
    if free_sizes:
        model = _free(module, inputs, c, model)
    params: dict[str, np.ndarray] = {}
    names: dict[str, str] = {}
    learned = [r for r in c.records if r.params and r.output not in c.unread]
    nodes = [n for n in model.graph.nodes if n.op.params()]
    for rec, node in zip(learned, nodes, strict=True):
        for pname, (array, fqn) in rec.params.items():
            params[node.param_name(pname)] = array
            names[node.param_name(pname)] = fqn
    shapes = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    out = Imported(model, params, names, shapes)
    _remember(out)
    return out


#: the latest imports by model identity, with their parameters' shapes only (a zero-stride
#: view each): ``to_module(model)`` of a model ``from_torch`` returned, unpacked from its
#: ``Imported``, still loads the original checkpoint. Bounded: older models are forgotten.
_ORIGINS: OrderedDict[int, Imported] = OrderedDict()
_KEEP = 16


def _remember(imported: Imported) -> None:
    shapes = {
        k: np.broadcast_to(np.zeros((), v.dtype), v.shape) for k, v in imported.params.items()
    }
    _ORIGINS[id(imported.model)] = attrs.evolve(imported, params=shapes)
    while len(_ORIGINS) > _KEEP:
        _ORIGINS.popitem(last=False)


def origin_of(model: Any) -> Imported | None:
    """The ``Imported`` (parameters as shapes only) ``model`` came from, if ``from_torch``
    returned it recently; else ``None``."""
    hit = _ORIGINS.get(id(model))
    return hit if hit is not None and hit.model is model else None


def _read(module: Any, inputs: tuple[Any, ...]) -> Capture:
    """Capture ``module`` and read its graph into records over settled axis variables."""
    program, spans = _capture(module, inputs)
    c = Capture(program, type(module).__name__)
    c.local_spans = spans
    c.run()
    c.axes.finish()
    return c


def _rebuild(c: Capture, root: str) -> Any:
    """Replay the records of ``c`` through ``ncd.trace`` (one definition per user module)."""
    program = c.program
    later: dict[str, int] = {}
    for i, rec in enumerate(c.records):
        for k in rec.inputs:
            later[k] = i
    outs = [c.ref[name] for name in c.outputs]
    for k in outs:
        later[k] = len(c.records) + 1
    types = [
        ArrayType(tuple(c.axes.axis(v) for v in c.dims[name]), c.dtype(_node(program, name)))
        for name in c.user_inputs
    ]

    def body(*ts: Any) -> Any:
        env = dict(zip(c.user_inputs, ts, strict=True))
        _emit(c, c.records, 0, env, later, 0)
        results = []
        for name, k in zip(c.outputs, outs, strict=True):
            want = tuple(c.axes.axis(v) for v in c._vars(c.dims[name]))
            t = env[k]
            if t.axes != want:  # ncd orders axes by lifting; restore PyTorch's dim order
                t = ops.prim(
                    ops.View(
                        t.axes,
                        want,
                        tuple((a,) for a in t.axes),
                        tuple((a,) for a in want),
                        name="to_torch_order",
                    )
                )(t)
            results.append(t)
        return tuple(results) if len(results) > 1 else results[0]

    try:
        return trace(inputs=types, name=_snake(root), label=_snake(root))(body)
    except (ValueError, TypeError) as e:  # an identity the rules inferred contradicts an op
        raise TorchImportError(
            f"from_torch: {root} was captured but could not be rebuilt as an ncd model: {e}. "
            "Fix: simplify the part of forward that mixes these dims, or build it with ncd.ops."
        ) from e


def _other_inputs(
    c: Capture, inputs: tuple[Any, ...], labels: tuple[str, ...]
) -> tuple[Any, ...] | None:
    """The example inputs at another batch (one more) and length (one less, or one more when
    the example's is at most 2), for the dims of ``labels`` only: the second capture that
    tells which sizes may stay free."""
    import torch

    out = []
    changed = False
    for name, x in zip(c.user_inputs, inputs, strict=True):
        for dim, v in enumerate(c.dims[name]):
            label, n = c.axes.name(v), c.axes.size[v]
            if label not in labels:
                continue
            if label == "batch":
                x = torch.cat([x, x.narrow(dim, 0, 1)], dim)
            else:  # seq_k: a padding mask over the keys
                x = x.narrow(dim, 0, n - 1) if n > 2 else torch.cat([x, x.narrow(dim, 0, 1)], dim)
            changed = True
        out.append(x)
    return tuple(out) if changed else None


def _shape_free(graph: Any) -> dict[str, Any]:
    data = serialize.graph_to_dict(graph)
    data["axes"] = [a["name"] for a in data["axes"]]
    return data


def _free(module: Any, inputs: tuple[Any, ...], c: Capture, model: Any) -> Any:
    """``model`` with the size classes free that differ between this capture and one at
    another batch and length (same graph otherwise) and that no parameter fixes; when the
    module does not import to the same graph at another length (a reshape that folds it), or
    a size would follow the length that no input carries (a chunk of it), at another batch
    alone."""
    if len(c.user_inputs) != len(inputs):
        return model
    graph = model.graph
    fixed = {a.uid for n in graph.nodes for p in n.op.params() for a in p.axes}
    fixed |= {c.axes.axis(v).uid for v in c.pinned}
    # a window or chunk of keys no shorter than the example read as causal there: it means
    # the same only up to that span, so the length stays the example's
    lengths = [c.axes.size[v] for n in c.user_inputs for v in c.dims[n] if c.axes.name(v) == "seq"]
    hidden = any(s >= n for s in c.local_spans for n in lengths)
    for labels in (("batch",),) if hidden else (("batch", "seq", "seq_k"), ("batch",)):
        other = _other_inputs(c, inputs, labels)
        second = _second(module, other) if other is not None else None
        if second is None or _shape_free(second.graph) != _shape_free(graph):
            continue
        sizes = {a.uid: b.size for a, b in zip(graph.axes, second.graph.axes, strict=True)}
        uids: set[str] = set()
        for var in model.config().bound:
            members = {a.uid for a in var.axes}
            if all(sizes[u] != var.size for u in members) and not members & fixed:
                uids |= members
        if not uids:
            continue
        replaced = c.axes.free(uids)
        try:
            freed = _rebuild(c, type(module).__name__)
            if _runs_on(freed, inputs):
                return freed
        except NcdError:
            pass
        c.axes.restore(replaced)
    return model


def _runs_on(model: Any, inputs: tuple[Any, ...]) -> bool:
    """Every free size of ``model`` follows from the shapes of ``inputs``."""
    graph = model.graph
    sizes: dict[Any, int] = {}
    for v, x in zip(graph.inputs, inputs, strict=True):
        for a, n in zip(graph.values[v].axes, x.shape, strict=True):
            if graph.size(a) is None:
                sizes[a] = int(n)
    return not graph.bind(sizes).config().free


def _second(module: Any, inputs: tuple[Any, ...]) -> Any:
    """The module imported at other sizes, or ``None`` where it does not run or import."""
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a module that fails at other sizes is an answer here
    try:
        return _rebuild(_read(module, inputs), type(module).__name__)
    except Exception:
        return None
    finally:
        quiet.setLevel(level)


def _node(program: Any, name: str) -> Any:
    return next(n for n in program.graph.nodes if n.name == name)


def _capture(module: Any, inputs: tuple[Any, ...]) -> tuple[Any, list[int]]:
    """``torch.export`` first; if it fails, export the ``torch.fx`` symbolic trace instead.
    With the spans of the local (sliding-window, chunked) masks transformers built."""
    import torch

    from ncd_torch._import_hf import masks_without_vmap

    try:
        with masks_without_vmap() as spans:
            return torch.export.export(module, inputs), spans
    except Exception as first:
        try:
            traced = torch.fx.symbolic_trace(module)
            with masks_without_vmap() as spans:
                return torch.export.export(traced, inputs), spans
        except Exception:
            raise TorchImportError(
                f"from_torch could not capture {type(module).__name__}: torch.export failed with "
                f"{type(first).__name__}: {first}. Fix: make forward traceable (no data-dependent "
                "control flow) or pass example inputs of the right shapes."
            ) from first
