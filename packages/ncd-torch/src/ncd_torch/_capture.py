"""Capture: reads a ``torch.export`` program node by node for ``from_torch``.

Each ATen node goes through the rule table of ``_import_rules.py``; rules call back into the
``Capture`` to read shapes and module paths, track each value's dims as axis variables
(``_import_axes.py``), and record the ncd ops the node stands for. Reshapes and the folding of
head splits into ``nn.Linear`` live in ``_capture_views.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from ncd import ops
from ncd.axis import Axis
from ncd.dtypes import dtype as to_dtype
from ncd.dtypes import float32
from ncd.errors import NcdError
from ncd.op import Op, pinned_format
from ncd.primitives.library import Parameter, View
from ncd_torch._capture_views import ViewsMixin
from ncd_torch._dtypes import to_numpy
from ncd_torch._import_axes import AxisTable, Grouped
from ncd_torch._import_errors import Problem, Site, report, site_of
from ncd_torch._import_rules import (
    GROUPED_SAFE,
    IMPORT_RULES,
    SIZE1_SAFE,
    Refusal,
    TorchImportError,
)
from ncd_torch._import_tied import tied_params

__all__ = ["Capture", "Record", "Scope"]

Scope = tuple[str, str, str]  # (kind, label, module path)


@attrs.define
class Record:
    op: Op
    inputs: list[str]
    output: str
    stack: tuple[Scope, ...]
    params: dict[str, tuple[np.ndarray, str]]


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


_TORCH_DIR = _torch_dir()


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.split(".")[-1]).lower()


#: modules outside torch that import like torch.nn leaves (their ops take the module's name)
LEAF_MODULES = ("transformers.pytorch_utils.Conv1D",)


def _builtin(cls: Any) -> bool:
    text = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
    return text.startswith("torch.") or text in LEAF_MODULES


def _class_name(cls: Any) -> str:
    return cls.rsplit(".", 1)[-1] if isinstance(cls, str) else cls.__qualname__


NameSet = set[str]  # (``Capture.set`` shadows the builtin inside the class)

#: ops whose support depends on what produced their operand (a split of an nn.Linear's output)
_CONTEXT = ("aten.split", "aten.split_with_sizes")


class Capture(ViewsMixin):
    """Reads an exported program node by node (the rules call back into it)."""

    def __init__(self, program: Any, root: str = "") -> None:
        sig = program.graph_signature
        self.program = program
        self.root = root or "the module"
        self.param_of = dict(sig.inputs_to_parameters)
        self.tied = tied_params(program)  # parameters two ops read: one ncd parameter each
        # buffers and lifted constants: only 0-d ones are importable (as ncd constants)
        self.const_of = {**sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
        self.user_inputs = list(sig.user_inputs)
        self.axes = AxisTable()
        self.merges: dict[int, tuple[int, ...]] = {}
        self.dims: dict[str, list[Any]] = {}
        self.ref: dict[str, str] = {}
        self.records: list[Record] = []
        self.extra_scopes: list[Scope] = []
        self._placeholders: dict[int, Axis] = {}
        self._count = 0
        self.draws = 0  # random ops imported so far: the next one's seed
        #: torch name -> the record (its key and op) of the parameter source that read it first
        self.sources: dict[str, tuple[str, Parameter]] = {}
        self._pending: list[str] = []
        self.done: set[str] = set()
        #: axis variables whose size the graph depends on beyond what it records (a slice
        #: clamped to this length): ``from_torch`` keeps their sizes bound
        self.pinned: set[int] = set()
        self.outputs: list[str] = []
        # fx node name -> tensor computed from buffers and constants alone (a causal mask made
        # from a registered tril buffer); rules read these values, nothing is recorded for them
        #: records of blocks whose results nothing reads, which the rebuilt model leaves out
        self.unread: set[str] = set()
        #: the spans of the local masks (sliding windows, chunks) transformers built
        self.local_spans: list[int] = []
        self.folded: dict[str, Any] = {}
        self.static = self._static_nodes()
        self.problems: list[Problem] = []
        self.poisoned: NameSet = set()  # nodes not imported (noted, or reading such a node)
        self._interp: Any = None

    # -- reading nodes -----------------------------------------------------------------------------
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

    def site(self, node: Any) -> Site:
        """Module path, class and source line of ``node``."""
        return site_of(
            self.module_stack(node), node.meta.get("stack_trace") or "", self.root, _TORCH_DIR
        )

    def unsupported(self, node: Any, what: str = "") -> Refusal:
        """The refusal of ``node`` (or of the form ``what`` of it); the walk notes it, goes on."""
        return Refusal(node, what)

    def _note(self, node: Any, detail: str) -> None:
        op = self.aten(node) if node.op == "call_function" else node.op
        if node.op not in ("call_function", "output"):
            op = f"{node.op} {node.target}"
        trace = node.meta.get("stack_trace") or ""
        if any(w in trace for w in ("cache_utils.py", "past_key_value")):
            detail = "a key/value cache update: call the model with use_cache=False"
        self.problems.append(Problem(op, node.name, self.site(node), detail))
        self.poisoned.add(node.name)

    def leaf(self, node: Any) -> str:
        """The op's name: its torch.nn module's path relative to the enclosing user module."""
        stack = self.module_stack(node)
        if not stack or not _builtin(stack[-1][1]):
            return ""
        owner = next((p for p, c in reversed(stack) if not _builtin(c)), "")
        path = stack[-1][0]
        return path[len(owner) + 1 :] if owner else path

    def scopes(self, node: Any) -> tuple[Scope, ...]:
        out: list[Scope] = []
        parent = ""
        for path, cls in self.module_stack(node):
            if _builtin(cls) or not path:
                continue
            label = path[len(parent) + 1 :] if parent else path
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

    # -- values ------------------------------------------------------------------------------------
    def _vars(self, dims: Sequence[Any]) -> list[int]:
        """The axis variables of ``dims`` (a tuple is a pending fold, None a size-1 dim, a
        ``Grouped`` dim holds its kv-head axis only)."""
        out: list[int] = []
        for d in dims:
            if isinstance(d, Grouped):
                out.append(d.kv)
            elif isinstance(d, tuple):
                out.extend(d)
            elif d is not None:
                out.append(d)
        return out

    def set(self, node: Any, dims: list[Any], recorded: bool = False) -> None:
        """``node``'s dims; its value is the op recorded last (``recorded``: just now)."""
        self.dims[node.name] = dims
        last = self._last_record if recorded else self.ref.get(f"last:{node.name}", node.name)
        self.ref.setdefault(node.name, last)
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
            elif arg.name in self.const_of or arg.name in self.folded:
                self._constant(arg)
            else:
                raise TorchImportError(f"from_torch: value {arg.name!r} is not a captured tensor")
        return str(arg.name)

    def _constant(self, arg: Any) -> None:
        """A buffer, constant or value evaluated at import used as an operand: a 0-d tensor, or
        a uniform one that only broadcasts against activations, is an ncd ``Constant``."""
        import torch

        fqn = self.const_of.get(arg.name, arg.name)
        user = next(iter(arg.users))
        tensor = self.folded[arg.name] if arg.name in self.folded else self._stored(arg.name)
        if not isinstance(tensor, torch.Tensor):
            raise self.unsupported(user, f"the non-tensor value {fqn!r} as an operand")
        scalar = tensor.dim() == 0 or (
            tensor.numel() > 0
            and bool((tensor == tensor.flatten()[0]).all())
            and all(self._broadcasts_away(u, arg) for u in arg.users)
        )
        if not scalar and self._band_constant(user, arg, tensor):
            return
        if not scalar:
            raise self.unsupported(
                user,
                f"the buffer or constant tensor {fqn!r} of shape {list(tensor.shape)} as an "
                "operand (0-d and uniform constants, causal masks and position ids import)",
            )
        out = self._record(user, ops.Constant(float(tensor.flatten()[0].item())), [], {})
        self.dims[arg.name] = []
        self.ref[arg.name] = out

    def _band_constant(self, user: Any, arg: Any, tensor: Any) -> bool:
        """A constant bool mask over its last two dims that is true on a band of diagonals,
        ``lo <= k - q <= hi`` (a causal mask, its complement, a sliding window: HF's mask
        functions and-ed with a padding mask) as an operand: index ramps compared, so it holds
        at every length. A bound that cuts nothing at the example's sizes is left out.
        ``False``: not such a mask."""
        import torch

        shape = tuple(int(n) for n in tensor.shape)
        if tensor.dtype != torch.bool or len(shape) < 2 or min(shape[-2:]) < 2:
            return False
        if any(n != 1 for n in shape[:-2]):
            return False
        nq, nk = shape[-2:]
        m = tensor.reshape(nq, nk)
        offset = torch.arange(nk)[None, :] - torch.arange(nq)[:, None]
        kept, other = set(offset[m].tolist()), set(offset[~m].tolist())
        if not kept or not other or kept & other:
            return False  # uniform (a scalar), or not a function of k - q
        lo, hi = min(kept), max(kept)
        if kept != set(range(lo, hi + 1)):
            return False
        q, k = self.axes.new(nq, "seq", 3), self.axes.new(nk, "seq_k", 3)
        with pinned_format(float32):  # positions, exact whatever format the model is cast to

            def record(op: Op, inputs: list[str], dims: list[Any]) -> str:
                out = self._record(user, op, inputs, {})
                self.dims[out] = dims
                return out

            rq = record(ops.Arange(self.axis(q)), [], [q])
            rk = record(ops.Arange(self.axis(k)), [], [k])
            gap = record(ops.Binary("sub"), [rk, rq], [q, k])
            bounds = [("ge", lo)] if lo > -(nq - 1) else []
            bounds += [("le", hi)] if hi < nk - 1 else []
            out = [record(ops.Scalar(fn, float(b)), [gap], [q, k]) for fn, b in bounds]
            if len(out) == 2:
                both = record(ops.Binary("mul"), out, [q, k])
                out = [record(ops.Scalar("ne", 0.0, name="band"), [both], [q, k])]
        self.dims[arg.name] = [*([None] * (len(shape) - 2)), q, k]
        self.ref[arg.name] = out[0]
        return True

    def _broadcasts_away(self, user: Any, arg: Any) -> bool:
        """``user`` is elementwise arithmetic whose result has the shape of its other operand,
        so a uniform ``arg`` acts as a scalar."""
        from ncd_torch._import_rules import ARITH

        others = [a for a in user.args[:2] if a is not arg and self.is_tensor(a)]
        return (
            self.aten(user) in ARITH
            and len(others) == 1
            and self.shape(others[0]) == self.shape(user)
        )

    def param(self, arg: Any) -> np.ndarray:
        if arg is None or getattr(arg, "name", None) not in self.param_of:
            raise TorchImportError(f"from_torch: {arg} must be a parameter of the module")
        fqn = self.param_of[arg.name]
        tensor = self.program.state_dict[fqn]
        self._pending.append(fqn)  # the next recorded op owns it
        return np.array(to_numpy(tensor))

    def _learned(self, arg: Any) -> None:
        fqn = self.param_of[arg.name]
        user = next(iter(arg.users))
        owner = next((p for p, c in reversed(self.module_stack(user)) if not _builtin(c)), "")
        name = fqn[len(owner) + 1 :] if owner and fqn.startswith(owner + ".") else fqn
        array = self.param(arg)
        self._pending.clear()
        dims = [
            self.axes.new(n, f"{name.split('.')[-1]}_{i}", 0) for i, n in enumerate(array.shape)
        ]
        out = self._record(
            user,
            ops.Learned(tuple(self.axis(v) for v in dims), name=name),
            [],
            {"weight": (array, fqn)},
        )
        self.dims[arg.name] = dims
        self.ref[arg.name] = out

    # -- recording ops -----------------------------------------------------------------------------
    def _record(
        self, node: Any, op: Op, inputs: list[str], params: dict[str, tuple[np.ndarray, str]]
    ) -> str:
        self._count += 1
        out = f"%{self._count}"
        formats = {to_dtype(a.dtype) for a, _ in params.values() if a.dtype.kind in "fV"}
        if len(formats) == 1 and formats != {float32} and getattr(op, "dtype", None) is None:
            op = attrs.evolve(op, dtype=formats.pop())  # a bf16/fp16/fp64 module's weights
        self.records.append(
            Record(op, [self.ref.get(k, k) for k in inputs], out, self.scopes(node), params)
        )
        self.ref[out] = out
        self.ref[f"last:{node.name}"] = out
        self._last_record = out
        self.axes.meet(
            {int(a.uid[1:]) for a in op.axes() if a.uid.startswith("~")}
            | {v for k in inputs for v in self._vars(self.dims.get(k, []))}
        )
        return out

    def take_pending(self) -> list[str]:
        """The PyTorch names of the parameters read since the last recorded op."""
        names, self._pending = self._pending, []
        return names

    def op(
        self,
        node: Any,
        op: Op,
        inputs: list[str],
        params: dict[str, np.ndarray] | None = None,
        extra: Sequence[int] = (),
        names: list[str] | None = None,
    ) -> str:
        pending = self.take_pending()
        names = pending if names is None else names
        source = op if isinstance(op, Parameter) and not inputs and len(names) == 1 else None
        if source is not None and names[0] in self.sources:
            key, first = self.sources[names[0]]  # a module called again: its one parameter
            parts = tuple((a,) for a in first.axes_)
            return self._record(node, View(first.axes_, source.axes_, parts, parts), [key], {})
        named = {k: (v, n) for (k, v), n in zip((params or {}).items(), names, strict=True)}
        out = self._record(node, op, inputs, named)
        if source is not None:
            self.sources[names[0]] = (out, source)
        if extra:
            self.axes.meet(extra)
        return out

    # -- the walk ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Walk every node; raise one ``TorchImportError`` listing all problems, if any."""
        import operator

        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                if node.name in self.user_inputs:
                    self._input(node)
            elif node.name in self.done:  # consumed by an earlier rule (a folded split)
                continue
            elif node.name in self.static:
                self._evaluate(node)
            elif node.op == "output":
                if not self.problems:
                    try:
                        self._outputs(node)
                    except Refusal as e:
                        self._note(e.node, e.detail)
            elif node.op != "call_function":
                self._note(node, "")
            else:
                self._call(node, operator.getitem)
        if self.problems:
            raise TorchImportError(report(self.root, self.problems), self.problems)

    def _call(self, node: Any, getitem: Any) -> None:
        name = self.aten(node)
        if "assert" in name:
            return
        rule = IMPORT_RULES.get(name)
        bad = any(a.name in self.poisoned for a in node.all_input_nodes)
        if rule is None:
            if bad and (node.target is getitem or name in _CONTEXT):  # follows a noted op
                self.poisoned.add(node.name)
            else:
                self._note(node, "")
            return
        if bad:
            self.poisoned.add(node.name)
            return
        if name not in GROUPED_SAFE and any(
            any(isinstance(d, Grouped) for d in self.dims.get(getattr(a, "name", ""), ()))
            for a in node.args
        ):
            self._note(
                node,
                "a key or value repeated over query-head groups (repeat_kv) read by an op other "
                "than attention's matmul or scaled_dot_product_attention",
            )
            return
        if name not in SIZE1_SAFE and any(
            None in self.dims.get(getattr(a, "name", ""), ()) for a in node.args
        ):
            self._note(node, "a size-1 broadcast dim (keepdim=True, unsqueeze) as an operand")
            return
        try:
            rule(self, node)
        except Refusal as e:
            self._note(e.node, e.detail)
            self.poisoned.add(node.name)
        except NcdError as e:
            self._note(node, str(e))

    def _outputs(self, node: Any) -> None:
        outs = []
        for a in node.args[0]:
            if not self.is_tensor(a):
                self._note(node, f"an output that is not a tensor ({type(a).__name__})")
                continue
            if a.name in self.folded:
                self._note(node, "an output computed from constants alone")
                continue
            if None in self.dims.get(self.key(a), ()):
                self._note(node, "an output with a size-1 broadcast dim (keepdim, unsqueeze)")
                continue
            outs.append(self.plain(a))
        self.outputs = outs

    @staticmethod
    def _random(node: Any) -> bool:
        name = str(getattr(node.target, "__name__", node.target))
        return any(w in name for w in ("rand", "bernoulli", "normal", "uniform", "multinomial"))

    def _static_nodes(self) -> NameSet:
        """Nodes that depend only on shapes, constants and buffers (evaluated at import)."""
        static = set(self.const_of)
        for node in self.program.graph.nodes:
            if node.op == "get_attr" or (
                node.op == "call_function"
                and not self._random(node)
                and all(a.name in static for a in node.all_input_nodes)
            ):
                static.add(node.name)
        return static

    def _evaluate(self, node: Any) -> None:
        """Run ``node`` with torch now: its value becomes a known tensor (``self.folded``)."""
        import torch

        if self._interp is None:
            self._interp = torch.fx.Interpreter(self.program.graph_module)
        env = self._interp.env
        for a in node.all_input_nodes:
            if a not in env:
                env[a] = self._stored(a.name)
        try:
            env[node] = self._interp.run_node(node)
        except Exception as e:  # a shape-only op torch itself cannot run on these values
            self._note(node, f"evaluating it at import failed: {type(e).__name__}: {e}")
            return
        self.folded[node.name] = env[node]

    def _stored(self, name: str) -> Any:
        fqn = self.const_of[name]
        return self.program.state_dict.get(fqn, self.program.constants.get(fqn))

    def _input(self, node: Any) -> None:
        shape = self.shape(node)
        floats = self.dtype(node).startswith(("float", "bfloat"))
        names = ["batch"] * len(shape)
        if floats and shape:
            names[-1] = "features"
            if len(shape) > 1:
                names[-2] = "seq"
        elif shape:
            names[-1] = "seq"
        # dim 0 is the batch; a dim between it and the last two is batch-like only until an op
        # names it (a conv's channels, a head): a weak hint, so the second capture at another
        # batch changes dim 0 and not a conv net's channels
        self.dims[node.name] = [
            self.axes.new(n, nm, 0 if nm == "features" else 0.1 if 0 < i < len(shape) - 2 else 1)
            for i, (n, nm) in enumerate(zip(shape, names, strict=True))
        ]
        self.ref[node.name] = node.name
