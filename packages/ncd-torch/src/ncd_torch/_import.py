"""Import: a PyTorch module becomes an ncd model with named axes and named blocks.

The module is captured with ``torch.export`` (an ATen graph with each node's module path and
source line); ``Capture`` walks its nodes in order through the rule table of
``_import_rules.py``, which records ncd ops over axis variables (``_import_axes.py``). Once
every variable's identity and name is settled, the records are replayed through ``ncd.trace``,
each user-defined submodule becoming a named definition (``blocks.0``, ``attn``...).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from ncd import ops, trace
from ncd.axis import ArrayType, Axis
from ncd.op import Op
from ncd_torch._import_axes import AxisTable
from ncd_torch._import_rules import ACTIVATIONS, IMPORT_RULES, VIEWS, TorchImportError

__all__ = ["Capture", "Imported", "from_torch"]

Scope = tuple[str, str, str]  # (kind, label, module path)


@attrs.define
class Record:
    op: Op
    inputs: list[str]
    output: str
    stack: tuple[Scope, ...]
    params: dict[str, tuple[np.ndarray, str]]


@attrs.frozen
class Imported:
    """What ``from_torch`` returns; unpacks as ``model, params = from_torch(...)``."""

    model: Any
    params: dict[str, np.ndarray]
    torch_names: dict[str, str]  # ncd parameter name -> PyTorch state_dict name

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.params))


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


_TORCH_DIR = _torch_dir()


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.split(".")[-1]).lower()


def _builtin(cls: Any) -> bool:
    text = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
    return text.startswith("torch.")


def _class_name(cls: Any) -> str:
    return cls.rsplit(".", 1)[-1] if isinstance(cls, str) else cls.__qualname__


class Capture:
    """Reads an exported program node by node (the rules call back into it)."""

    def __init__(self, program: Any) -> None:
        sig = program.graph_signature
        self.program = program
        self.param_of = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        self.user_inputs = list(sig.user_inputs)
        self.axes = AxisTable()
        self.dims: dict[str, list[Any]] = {}
        self.ref: dict[str, str] = {}
        self.records: list[Record] = []
        self.extra_scopes: list[Scope] = []
        self._placeholders: dict[str, Axis] = {}
        self._count = 0
        self._pending: list[str] = []
        self.outputs: list[str] = []

    # -- reading nodes ---------------------------------------------------------------------------
    @staticmethod
    def aten(node: Any) -> str:
        packet = getattr(node.target, "overloadpacket", node.target)
        return str(packet)

    @staticmethod
    def is_tensor(arg: Any) -> bool:
        import torch

        return hasattr(arg, "meta") and isinstance(arg.meta.get("val"), torch.Tensor)

    @staticmethod
    def shape(node: Any) -> tuple[int, ...]:
        return tuple(int(s) for s in node.meta["val"].shape)

    @staticmethod
    def dtype(node: Any) -> str:
        return str(node.meta["val"].dtype).removeprefix("torch.")

    def axis(self, v: int) -> Axis:
        """A stand-in axis for variable ``v``; swapped for the final axis when emitting."""
        if v not in self._placeholders:
            self._placeholders[v] = Axis("v", uid=f"~{v}", size=self.axes.size[v])
        return self._placeholders[v]

    def final(self, a: Axis) -> Axis:
        return self.axes.axis(int(a.uid[1:])) if a.uid.startswith("~") else a

    def module_stack(self, node: Any) -> list[tuple[str, Any]]:
        return list((node.meta.get("nn_module_stack") or {}).values())

    def where(self, node: Any) -> str:
        stack = self.module_stack(node)
        module = f"{stack[-1][0] or '(root)'} ({_class_name(stack[-1][1])})" if stack else "(root)"
        frames = re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s*(.*)', node.meta.get("stack_trace") or "")
        user = [f for f in frames if not f[0].startswith(_TORCH_DIR)]
        site = f", {os.path.basename(user[-1][0])}:{user[-1][1]}: {user[-1][2].strip()}" if user else ""
        return f"module {module}{site}"

    def unsupported(self, node: Any, what: str = "") -> TorchImportError:
        op = f"{node.target}" + (f" with {what}" if what else "")
        return TorchImportError(
            f"from_torch cannot import {op} (fx node {node.name!r}) at {self.where(node)}. "
            f"Supported: {', '.join(sorted(IMPORT_RULES))}. Fix: rewrite that part with the "
            "supported ops, or build it with ncd.ops."
        )

    def leaf(self, node: Any) -> str:
        """The op's name: its torch.nn module's path relative to the enclosing user module."""
        stack = self.module_stack(node)
        if not stack or not _builtin(stack[-1][1]):
            return ""
        owner = next((p for p, c in reversed(stack) if not _builtin(c)), "")
        path = stack[-1][0]
        return path[len(owner) + 1:] if owner else path

    def scopes(self, node: Any) -> tuple[Scope, ...]:
        out: list[Scope] = []
        parent = ""
        for path, cls in self.module_stack(node):
            if _builtin(cls) or not path:
                continue
            label = path[len(parent) + 1:] if parent else path
            out.append((_snake(_class_name(cls)), label, path))
            parent = path
        return (*out, *self.extra_scopes)

    @contextlib.contextmanager
    def scope(self, node: Any, kind: str) -> Iterator[None]:
        base = self.scopes(node)[-1][2] if self.scopes(node) else ""
        self.extra_scopes.append((kind, kind, f"{base}.{kind}#{node.name}"))
        try:
            yield
        finally:
            self.extra_scopes.pop()

    # -- values ----------------------------------------------------------------------------------
    def _vars(self, dims: Sequence[Any]) -> list[int]:
        return [v for d in dims for v in (d if isinstance(d, tuple) else (d,))]

    def set(self, node: Any, dims: list[Any]) -> None:
        self.dims[node.name] = dims
        self.ref.setdefault(node.name, self.ref.get(f"last:{node.name}", node.name))
        self.axes.meet(self._vars(dims))

    def alias(self, node: Any, src: Any, dims: list[Any] | None = None) -> None:
        """``node`` is the value ``src`` (a node or a key) with its dims possibly reordered."""
        key = src if isinstance(src, str) else self.key(src)
        self.dims[node.name] = list(self.dims[key]) if dims is None else dims
        self.ref[node.name] = self.ref[key]

    def key(self, arg: Any) -> str:
        if arg.name not in self.dims:
            if arg.name in self.param_of:
                self._learned(arg)
            else:
                raise TorchImportError(f"from_torch: value {arg.name!r} is not a captured tensor")
        return str(arg.name)

    def plain(self, arg: Any) -> str:
        """The key of ``arg`` with any folded (heads, d_head) dim merged back into one axis."""
        key = self.key(arg)
        dims = self.dims[key]
        if not any(isinstance(d, tuple) for d in dims):
            return key
        new, in_parts, out_parts, ins, outs = [], [], [], [], []
        for d in dims:
            if isinstance(d, tuple):
                merged = self.axes.new(int(np.prod([self.axes.size[v] for v in d])),
                                       "_".join(self.axes.name(v) for v in d), 0.5)
                ins.extend(d)
                in_parts.extend((v,) for v in d)
                outs.append(merged)
                out_parts.append(d)
                d = merged
            new.append(d)
        return self._view(arg, key, ins, outs, in_parts, out_parts, new)

    def _view(self, node: Any, key: str, ins: list[int], outs: list[int], in_parts: list[Any],
              out_parts: list[Any], dims: list[Any]) -> str:
        A = self.axis
        op = ops.View(tuple(A(v) for v in ins), tuple(A(v) for v in outs),
                    tuple(tuple(A(v) for v in p) for p in in_parts),
                    tuple(tuple(A(v) for v in p) for p in out_parts))
        out = self.op(node, op, [key])
        self.dims[out] = dims
        return out

    def rename(self, node: Any, key: str, old: int, new: int) -> str:
        dims = [new if d == old or (isinstance(d, int) and self.axes.same(d, old)) else d
                for d in self.dims[key]]
        return self._view(node, key, [old], [new], [(old,)], [(old,)], dims)

    def broadcast(self, node: Any, a: Sequence[int], b: Sequence[int]) -> list[int]:
        """Right-aligned broadcasting: equal dims become one axis."""
        out = list(a if len(a) >= len(b) else b)
        for i in range(1, min(len(a), len(b)) + 1):
            x, y = a[-i], b[-i]
            if self.axes.size[x] != self.axes.size[y]:
                raise self.unsupported(node, "broadcasting a size-1 dim against a larger one")
            self.axes.union(x, y)
            out[-i] = x
        return out

    def param(self, arg: Any) -> np.ndarray:
        if arg is None or getattr(arg, "name", None) not in self.param_of:
            raise TorchImportError(f"from_torch: {arg} must be a parameter of the module")
        fqn = self.param_of[arg.name]
        tensor = self.program.state_dict.get(fqn)
        if tensor is None:
            tensor = self.program.constants[fqn]
        self._pending.append(fqn)  # the next recorded op owns it
        return np.array(tensor.detach().cpu().numpy())

    def _learned(self, arg: Any) -> None:
        fqn = self.param_of[arg.name]
        user = next(iter(arg.users))
        owner = next((p for p, c in reversed(self.module_stack(user)) if not _builtin(c)), "")
        name = fqn[len(owner) + 1:] if owner and fqn.startswith(owner + ".") else fqn
        array = self.param(arg)
        self._pending.clear()
        dims = [self.axes.new(n, f"{name.split('.')[-1]}_{i}", 0) for i, n in enumerate(array.shape)]
        out = self._record(user, ops.Learned(tuple(self.axis(v) for v in dims), name=name), [],
                           {"weight": (array, fqn)})
        self.dims[arg.name] = dims
        self.ref[arg.name] = out

    # -- the rules' view helpers ------------------------------------------------------------------
    def users_are(self, node: Any, names: Sequence[str]) -> bool:
        return bool(node.users) and all(self.aten(u) in names for u in node.users)

    def feeds_activation(self, node: Any) -> bool:
        return self.users_are(node, (*ACTIVATIONS, "aten.gelu"))

    def split_by_view(self, node: Any, features: int) -> tuple[int, int] | None:
        if len(node.users) != 1 or not self.users_are(node, VIEWS):
            return None
        shape, new = self.shape(node), self.shape(next(iter(node.users)))
        if len(new) == len(shape) + 1 and new[:-2] == shape[:-1] and new[-2] * new[-1] == features \
                and min(new[-2:]) > 1:
            return new[-2], new[-1]
        return None

    def reshape(self, node: Any, src: Any, shape: tuple[int, ...]) -> None:
        key = self.key(src)
        dims = self.dims[key]
        if dims and isinstance(dims[-1], tuple) and \
                tuple(self.axes.size[v] for v in dims[-1]) == shape[len(dims) - 1:]:
            self.alias(node, src, [*dims[:-1], *dims[-1]])  # the split folded into nn.Linear
            return
        sizes = tuple(self.axes.size[d] for d in dims if isinstance(d, int))
        if len(dims) >= 2 and len(shape) == len(dims) - 1 and shape[:-1] == sizes[:-2] \
                and self.users_are(node, ("aten.linear",)) \
                and all(u.args[0] is node for u in node.users):
            self.alias(node, src, [*dims[:-2], (dims[-2], dims[-1])])  # folds into nn.Linear
            return
        key = self.plain(src)
        self._segments(node, key, shape)

    def _segments(self, node: Any, key: str, shape: tuple[int, ...]) -> None:
        dims = self.dims[key]
        i = j = 0
        new: list[Any] = []
        ins, outs, in_parts, out_parts = [], [], [], []
        while i < len(dims) and j < len(shape):
            si, sj = [dims[i]], [shape[j]]
            while int(np.prod([self.axes.size[v] for v in si])) != int(np.prod(sj)):
                if int(np.prod([self.axes.size[v] for v in si])) < int(np.prod(sj)):
                    i += 1
                    if i >= len(dims):
                        raise self.unsupported(node, f"the reshape to {list(shape)}")
                    si.append(dims[i])
                else:
                    j += 1
                    if j >= len(shape):
                        raise self.unsupported(node, f"the reshape to {list(shape)}")
                    sj.append(shape[j])
            i, j = i + 1, j + 1
            if len(si) == 1 and len(sj) == 1:
                new.append(si[0])
            elif len(si) == 1:
                names = ("heads", "d_head") if len(sj) == 2 else \
                    tuple(f"{self.axes.name(si[0])}_{k}" for k in range(len(sj)))
                parts = [self.axes.new(n, nm, 1) for n, nm in zip(sj, names, strict=True)]
                ins.append(si[0])
                in_parts.append(tuple(parts))
                new.extend(parts)
                outs.extend(parts)
                out_parts.extend((p,) for p in parts)
            elif len(sj) == 1:
                merged = self.axes.new(sj[0], "_".join(self.axes.name(v) for v in si), 0.5)
                ins.extend(si)
                in_parts.extend((v,) for v in si)
                outs.append(merged)
                out_parts.append(tuple(si))
                new.append(merged)
            else:
                raise self.unsupported(node, f"the reshape to {list(shape)} (split and merge at once)")
        if i != len(dims) or j != len(shape):
            raise self.unsupported(node, f"the reshape to {list(shape)} (adds or drops size-1 dims)")
        if not ins:
            self.alias(node, key, new)
            return
        self.alias(node, self._view(node, key, ins, outs, in_parts, out_parts, new), new)

    # -- recording ops -----------------------------------------------------------------------------
    def _record(self, node: Any, op: Op, inputs: list[str],
                params: dict[str, tuple[np.ndarray, str]]) -> str:
        self._count += 1
        out = f"%{self._count}"
        self.records.append(Record(op, [self.ref.get(k, k) for k in inputs], out, self.scopes(node),
                                   params))
        self.ref[out] = out
        self.ref[f"last:{node.name}"] = out
        self.axes.meet({int(a.uid[1:]) for a in op.axes() if a.uid.startswith("~")}
                       | {v for k in inputs for v in self._vars(self.dims.get(k, []))})
        return out

    def op(self, node: Any, op: Op, inputs: list[str], params: dict[str, np.ndarray] | None = None,
           extra: Sequence[int] = ()) -> str:
        names, self._pending = self._pending, []
        named = {k: (v, n) for (k, v), n in zip((params or {}).items(), names, strict=True)}
        out = self._record(node, op, inputs, named)
        if extra:
            self.axes.meet(extra)
        return out

    # -- the walk ------------------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                if node.name in self.user_inputs:
                    self._input(node)
            elif node.op == "call_function":
                rule = IMPORT_RULES.get(self.aten(node))
                if rule is None:
                    if "assert" in self.aten(node) or "_assert" in str(node.target):
                        continue
                    raise self.unsupported(node)
                rule(self, node)
            elif node.op == "output":
                self.outputs = [self.plain(a) for a in node.args[0]]
            elif node.op != "get_attr":
                raise self.unsupported(node)

    def _input(self, node: Any) -> None:
        shape = self.shape(node)
        floats = self.dtype(node).startswith("float")
        names = ["batch"] * len(shape)
        if floats and shape:
            names[-1] = "features"
            if len(shape) > 1:
                names[-2] = "seq"
        elif shape:
            names[-1] = "seq"
        self.dims[node.name] = [self.axes.new(n, nm, 1 if nm != "features" else 0)
                                for n, nm in zip(shape, names, strict=True)]
        self.ref[node.name] = node.name


def _emit(c: Capture, recs: list[Record], depth: int, env: dict[str, Any], later: dict[str, int],
          start: int) -> None:
    pos = 0
    while pos < len(recs):
        rec = recs[pos]
        if len(rec.stack) <= depth:
            op = rec.op.substitute(c.final)
            env[rec.output] = ops.prim(op)(*(env[k] for k in rec.inputs))
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
        if not outs:  # a block whose results nothing reads
            pos = end
            continue

        def body(*ts: Any, group: list[Record] = group, ins: list[str] = ins,
                 outs: list[str] = outs, first: int = first) -> Any:
            inner = dict(zip(ins, ts, strict=True))
            _emit(c, group, depth + 1, inner, later, first)
            return tuple(inner[k] for k in outs) if len(outs) > 1 else inner[outs[0]]

        types = [ArrayType(env[k].axes, env[k].type.dtype) for k in ins]
        sub = trace(body, inputs=types, name=scope[0], label=scope[1])
        result = sub(*(env[k] for k in ins))
        env.update(zip(outs, result if len(outs) > 1 else (result,), strict=True))
        pos = end


def from_torch(module: Any, example_inputs: Sequence[Any]) -> Imported:
    """Capture ``module`` on ``example_inputs`` and rebuild it as an ncd model.

    Returns ``Imported(model, params, torch_names)`` (it unpacks as ``model, params``): sizes
    are bound to the example's, parameters are named by the block hierarchy, and
    ``ncd.run(model, *inputs, params=params)`` equals ``module(*inputs)``.
    """
    program = _capture(module, tuple(example_inputs))
    c = Capture(program)
    c.run()
    c.axes.finish()
    later: dict[str, int] = {}
    for i, rec in enumerate(c.records):
        for k in rec.inputs:
            later[k] = i
    outs = [c.ref[name] for name in c.outputs]
    for k in outs:
        later[k] = len(c.records) + 1
    types = [ArrayType(tuple(c.axes.axis(v) for v in c.dims[name]), c.dtype(_node(program, name)))
             for name in c.user_inputs]
    root = type(module).__name__

    def body(*ts: Any) -> Any:
        env = dict(zip(c.user_inputs, ts, strict=True))
        _emit(c, c.records, 0, env, later, 0)
        results = []
        for name, k in zip(c.outputs, outs, strict=True):
            want = tuple(c.axes.axis(v) for v in c._vars(c.dims[name]))
            t = env[k]
            if t.axes != want:  # ncd orders axes by lifting; restore PyTorch's dim order
                t = ops.prim(ops.View(t.axes, want, tuple((a,) for a in t.axes),
                                    tuple((a,) for a in want), name="to_torch_order"))(t)
            results.append(t)
        return tuple(results) if len(results) > 1 else results[0]

    model = trace(body, inputs=types, name=_snake(root), label=_snake(root))
    params: dict[str, np.ndarray] = {}
    names: dict[str, str] = {}
    learned = [r for r in c.records if r.params]
    nodes = [n for n in model.graph.nodes if n.op.params()]
    for rec, node in zip(learned, nodes, strict=True):
        for pname, (array, fqn) in rec.params.items():
            params[node.param_name(pname)] = array
            names[node.param_name(pname)] = fqn
    return Imported(model, params, names)


def _node(program: Any, name: str) -> Any:
    return next(n for n in program.graph.nodes if n.name == name)


def _capture(module: Any, inputs: tuple[Any, ...]) -> Any:
    """``torch.export`` first; if it fails, export the ``torch.fx`` symbolic trace instead."""
    import torch

    try:
        return torch.export.export(module, inputs)
    except Exception as first:
        try:
            traced = torch.fx.symbolic_trace(module)
            return torch.export.export(traced, inputs)
        except Exception:
            raise TorchImportError(
                f"from_torch could not capture {type(module).__name__}: torch.export failed with "
                f"{type(first).__name__}: {first}. Fix: make forward traceable (no data-dependent "
                "control flow) or pass example inputs of the right shapes."
            ) from first
