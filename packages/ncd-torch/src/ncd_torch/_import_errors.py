"""The one error ``from_torch`` raises for a model it cannot import: every unsupported op of the
model at once, grouped by the module it came from, with advice specific to each op.

``Capture`` walks the whole graph before raising: an op without a rule, or a rule that refuses
the form it meets, is noted as a ``Problem`` and its result is poisoned (ops reading only
poisoned values are skipped, ops without a rule are still noted), so a ResNet lists every
batch norm and adaptive pooling in one message instead of stopping at the first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import attrs

__all__ = ["ADVICE", "Problem", "Site", "advice", "report", "supported_ops"]

#: ATen op name (or a prefix of it ending in ``*``) -> why it does not import and what to do.
ADVICE: dict[str, str] = {
    "aten.conv*": "convolution imports in 1-d, 2-d and 3-d and transposed in 1-d (nn.Conv1d/2d/"
    "3d/ConvTranspose1d: windows then an einsum, with stride, int padding, dilation, groups, "
    "bias); 2-d and 3-d transposed ones do not yet: build them with ncd.ops.window (upsample, "
    "reverse) and ncd.ops.einsum",
    "aten.cudnn_convolution*": "export the model on the CPU: aten.conv1d/conv2d import (windows "
    "then an einsum)",
    "aten.max_pool*": "max pooling imports in 1-d, 2-d and 3-d (a windowed max, ceil_mode too, "
    "return_indices as int64 positions); check the kernel, stride and padding are ints",
    "aten.avg_pool*": "average pooling imports in 1-d, 2-d and 3-d (a windowed mean, "
    "count_include_pad=True or no padding); divisor_override does not yet",
    "aten.adaptive_*": "adaptive average pooling imports where the output size divides the input "
    "(kernel = stride = input // output); adaptive max pooling and other sizes are not "
    "supported yet",
    "aten.batch_norm": "batch norm imports in eval mode (running statistics) and in train "
    "mode (batch statistics over [N, C, *spatial]; the running statistics are not updated by "
    "the imported model: write ncd.ops.batch_norm(over=..., running=True) for that)",
    "aten._native_batch_norm_legit*": "batch norm imports from torch.export's aten.batch_norm "
    "(eval or train mode); this lower-level form does not",
    "aten.group_norm": "group norm imports over [N, C, *spatial] with groups dividing C",
    "aten.instance_norm": "instance norm imports without running statistics "
    "(track_running_stats=False, torch's default)",
    "aten.lstm": "nn.LSTM imports with (h_0, c_0) model values (an input, a computed tensor) or "
    "constants of one value throughout, and (h_n, c_n) read, without proj_size or "
    "training-mode dropout between layers: pass a constant of several values as an input, "
    "call module.eval()",
    "aten.gru": "nn.GRU imports with h_0 a model value or a constant of one value throughout, "
    "and h_n read; a constant of several values does not: pass it as an input",
    "aten.rnn_*": "nn.RNN imports with h_0 a model value or a constant of one value "
    "throughout, and h_n read; a constant of several values does not: pass it as an input",
    "aten.cat": "concatenation imports for activations along one dim (ops.concat); a constant "
    "operand other than a uniform one does not",
    "aten.stack": "stack imports for tensors of one rank along a new dim (ops.concat of "
    "one-wide axes)",
    "aten.slice": "slices of activations import with step 1 along one dim (ops.slice); slices of "
    "buffers and constants are evaluated at import",
    "aten.select": "x[:, i] imports for a constant i along one dim (a one-wide ops.slice)",
    "aten.index": "x[:, idx] imports with one index tensor: a run of constant positions (a "
    "slice) or integer ids the model computes or takes (ops.gather)",
    "aten.index_select": "index_select imports with integer ids the model computes or takes "
    "(ops.gather); constant ids only as a run of consecutive positions",
    "aten.gather": "torch.gather imports with integer ids the model computes or takes, of the "
    "input's sizes off the gathered dim (ops.gather)",
    "aten.where": "where on activations is not supported yet (masks of shape-only values are "
    "evaluated at import)",
    "aten.expand": "expand of an activation is not supported yet (let broadcasting do it)",
    "aten.repeat": "x.repeat imports for the dims the input has (a repeat that adds leading "
    "dims does not: unsqueeze them first, or let broadcasting do it)",
    "aten.unsqueeze": "unsqueeze of an activation is not supported yet (let broadcasting do it)",
    "aten.squeeze": "squeeze imports for broadcast dims and one-wide axes of their own (a "
    "split's piece); a dim folded with another does not",
    "aten.to": "a cast between formats is not supported yet (only casts to the same format, "
    "which vanish)",
    "aten._to_copy": "a cast between formats is not supported yet (only casts to the same "
    "format, which vanish)",
    "output": "a model returns tensors computed from its inputs: wrap the module so that it "
    "returns only those (HF: .logits, called with use_cache=False)",
    "aten.topk": "data-dependent selection (topk, sort) is not supported (argmax/argmin and "
    "max/min along a dim import)",
    "aten.sort": "data-dependent selection (topk, sort) is not supported (argmax/argmin and "
    "max/min along a dim import)",
}

_FORMS = "imports only in the forms docs/torch.md lists: rewrite this use, or build it with ncd.ops"
_DEFAULT = "no ncd op stands for it yet: build that part with ncd.ops, or open an issue"


def advice(op: str) -> str:
    """What to tell the user about ``op`` (an ATen name such as ``aten.conv2d``)."""
    from ncd_torch._import_rules import IMPORT_RULES

    if op in ADVICE:
        return ADVICE[op]
    if op in IMPORT_RULES:
        return _FORMS
    for key, text in ADVICE.items():
        if key.endswith("*") and op.startswith(key[:-1]):
            return text
    return _DEFAULT


def supported_ops() -> list[str]:
    """Every ATen op ``from_torch`` imports, sorted (the rule table's keys). Ops whose operands
    are all shapes, constants and buffers are evaluated at import whatever they are."""
    from ncd_torch._import_rules import IMPORT_RULES

    return sorted(IMPORT_RULES)


@attrs.frozen
class Site:
    """Where a captured node came from."""

    path: str  # module path, "" for the root
    cls: str  # the module's class name
    line: str  # "file.py:12 `code`" of the user's frame, or ""
    torch_line: str  # "torch/nn/modules/conv.py:548" for torch's own modules, or ""


@attrs.frozen
class Problem:
    """One node that could not be imported."""

    op: str  # ATen name
    node: str  # fx node name
    site: Site
    detail: str = ""  # the form that is refused ("keepdim=True"), "" when the op has no rule


def site_of(stack: Sequence[tuple[str, object]], trace: str, root: str, torch_dir: str) -> Site:
    """The ``Site`` of a node from its ``nn_module_stack`` values and ``stack_trace``."""
    if stack:
        path, cls = stack[-1]
        text = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
        name = text.rsplit(".", 1)[-1]
    else:
        path, name = "", root
    frames = re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s*(.*)', trace or "")
    user = [f for f in frames if not f[0].startswith(torch_dir)]
    inside = [f for f in frames if f[0].startswith(torch_dir)]
    line = ""
    if user:
        code = user[-1][2].strip()
        code = code if len(code) <= 48 else code[:45] + "..."
        line = f"{os.path.basename(user[-1][0])}:{user[-1][1]} `{code}`"
    torch_line = ""
    if inside and stack and str(stack[-1][1]).startswith(("torch.", "<class 'torch.")):
        where = inside[-1][0][len(torch_dir) :].replace(os.sep, "/")
        torch_line = f"torch/{where}:{inside[-1][1]}"
    return Site(str(path), name, line, torch_line)


_MAX_GROUPS = 10
_MAX_ADVICE = 6


def report(root: str, problems: Sequence[Problem]) -> str:
    """The message: a header, one line per module (modules of one class with the same problems
    share a line), then one line of advice per op; under 20 lines whatever the model."""
    by_module: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        by_module.setdefault((p.site.path, p.site.cls), []).append(p)
    rows: dict[tuple[str, str], list[tuple[str, Site]]] = {}
    for (path, cls), ps in by_module.items():
        what = "; ".join(dict.fromkeys(f"{p.op} ({p.detail})" if p.detail else p.op for p in ps))
        rows.setdefault((cls, what), []).append((path or "(root)", ps[0].site))
    ops = list(dict.fromkeys(p.op for p in problems))
    lines = [
        f"from_torch cannot import {root}: {len(ops)} unsupported op(s) in "
        f"{len(by_module)} module(s) (ncd_torch.supported_ops() lists what imports):"
    ]
    for k, ((cls, what), members) in enumerate(rows.items()):
        if k == _MAX_GROUPS:
            rest = sum(len(m) for m in list(rows.values())[k:])
            lines.append(f"  ... and {rest} more module(s)")
            break
        paths = ", ".join(p for p, _ in members[:3])
        if len(members) > 3:
            paths += f" and {len(members) - 3} more"
        site = members[0][1]
        where = ", ".join(x for x in (site.line, site.torch_line) if x)
        lines.append(f"  {paths} ({cls}){': ' + where if where else ''}: {what}")
    lines.append("Why, and the fix:")
    for op in ops[:_MAX_ADVICE]:
        lines.append(f"  {op}: {advice(op)}")
    if len(ops) > _MAX_ADVICE:
        lines.append(f"  ... and {len(ops) - _MAX_ADVICE} more op(s): {_DEFAULT}")
    return "\n".join(lines)
