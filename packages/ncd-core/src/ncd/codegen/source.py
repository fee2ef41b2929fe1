"""A kernel body being built: nested blocks of IR statements (``ncd.codegen.ir``) and template
lines, with hoisting and per-block common-subexpression caches, and the sanitiser every name
passes through before it reaches generated code."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ncd.codegen.ir import Expr, Stmt

__all__ = ["CLASS_TAGS", "Block", "Writer", "kind_hint", "names_in", "sanitize"]

_BAD = re.compile(r"[^A-Za-z0-9_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: Lowercase class tags: every identifier holding outside text (an axis name, a parameter path,
#: a plugin's op kind) starts with ``<tag>_``, and no predefined name of OpenCL C or CUDA
#: (keywords, types, builtins, macros such as ``CL_VERSION_1_0``, ``FP_ILOGB``, ``M_PI``,
#: ``INFINITY``) starts with one of them followed by ``_``.
CLASS_TAGS = frozenset({"i", "i0", "w", "t", "n", "v", "k", "x"})
#: Built-in op kinds that name the values they compute as they are (``float softmax = ...``).
_OP_KINDS = frozenset(
    {
        "unary",
        "binary",
        "scalar",
        "einsum",
        "linear",
        "softmax",
        "l2norm",
        "layernorm",
        "rmsnorm",
        "causal_mask",
        "embedding",
        "dropout",
        "view",
        "learned",
        "reduce",
        "scale",
    }
)
#: Names the generator writes itself: template variables and the built-in op kinds.
_INTERNAL = (
    frozenset(
        {
            "gid",
            "acc",
            "dot",
            "ss",
            "sc",
            "pv",
            "p",
            "mv",
            "m",
            "lim",
            "lane",
            "l",
            "inv",
            "e",
            "d",
            "mu",
            "rstd",
            "sq",
            "sum",
            "mx",
            "den",
            "red",
            "rn",
            "tok",
            "id",
            "mnew",
            "c",
            "scale",
            "val",
            "mb",
            "ps",
            "qv",
            "t",
            "i",
            "v",
            "x",
            "n",
            "k",
            "nb",
        }
    )
    | _OP_KINDS
)
_INTERNAL_V = frozenset(f"{w}v" for w in _INTERNAL)  # vector accumulators (``sqv``)
#: template names with an index: ``m0``, ``s0_1``, ``in3``, ``out2``, ``k0_softmax_linear``
_NUMBERED = re.compile(r"(?:in|out|k|m|n|s|a|b|c)\d+(?:_[A-Za-z0-9]+)*")


def sanitize(name: str, prefix: str = "n") -> str:
    """A C identifier from any text that cannot collide with a predefined one: only
    ``[A-Za-z0-9_]``; the generator's own words as they are; anything else behind the class
    tag ``prefix`` (``i_``, ``w_``, ``t_``...) unless it already starts with a class tag."""
    if prefix not in CLASS_TAGS:
        raise ValueError(f"sanitize prefix {prefix!r} is not a class tag ({sorted(CLASS_TAGS)})")
    out = _BAD.sub("_", name)
    out = re.sub("_+", "_", out).strip("_")
    if not out:
        return prefix
    tag = out.split("_", 1)[0]
    trusted = (
        out in _INTERNAL
        or out in _INTERNAL_V
        or _NUMBERED.fullmatch(out) is not None
        or ("_" in out and tag in CLASS_TAGS)
    )
    if not trusted:
        out = f"{prefix}_{out}"
    return out[:48]


def kind_hint(kind: str) -> str:
    """The name hint for a value an op of ``kind`` computes: a built-in kind as it is, any other
    (a plugin's) behind the class tag ``t_``, so it can never be one of the names templates
    write without ``KernelGen.unique`` (the tiled matmul's ``nb``, ``a0``, ``c0_0``)."""
    return kind if kind in _OP_KINDS else f"t_{kind}"


class Block:
    """Statements and nested blocks under an optional head: a loop or guard of the IR
    (``ir.For``, ``ir.If``) or a template's text (``for (...)``, possibly after pragma lines)."""

    def __init__(self, header: str | Stmt | None = None, var: str | None = None) -> None:
        self.header = header
        self.var = var  # the index variable this block binds (a loop), if any
        self.items: list[str | Stmt | Block] = []
        self.cache: dict[Any, Any] = {}
        self.insert_at: int | None = None

    def add(self, item: str | Stmt | Block) -> None:
        if self.insert_at is None:
            self.items.append(item)
        else:
            self.items.insert(self.insert_at, item)
            self.insert_at += 1

    def render(self, indent: int, dialect: Any = None) -> list[str]:
        pad = "    " * indent
        lines: list[str] = []
        inner = indent
        if self.header is not None:  # a header may start with pragma lines (``#pragma unroll``)
            head_text = _text(self.header, dialect)
            *pragmas, head = head_text.split("\n")
            lines.extend(f"{pad}{p}" for p in pragmas)
            lines.append(f"{pad}{head} {{")
            inner = indent + 1
        for it in self.items:
            if isinstance(it, Block):
                lines.extend(it.render(inner, dialect))
            else:
                text = _text(it, dialect)
                lines.append(f"{'    ' * inner}{text}" if text else "")
        if self.header is not None:
            lines.append(f"{pad}}}")
        return lines

    def statements(self) -> Iterator[str | Stmt | Block]:
        """Every item of this block and of the blocks inside it, heads included, in order."""
        if self.header is not None:
            yield self.header
        for it in self.items:
            if isinstance(it, Block):
                yield from it.statements()
            else:
                yield it


def _text(item: str | Stmt, dialect: Any) -> str:
    if isinstance(item, str):
        return item
    from ncd.codegen.render import render_stmt

    return render_stmt(item, dialect)


def names_in(item: Expr | Stmt | str) -> frozenset[str]:
    """The identifiers an expression, a statement or a template's text reads."""
    if isinstance(item, str):
        return frozenset(_IDENT.findall(item))
    return item.names


class Writer:
    """Emits statements into the innermost open block; can emit into an outer one (hoisting)."""

    def __init__(self) -> None:
        self.root = Block()
        self.stack: list[Block] = [self.root]
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{sanitize(hint, 't')}{self._n}"

    def line(self, item: str | Stmt) -> None:
        self.stack[-1].add(item)

    @contextmanager
    def block(self, header: str | Stmt, var: str | None = None) -> Iterator[Block]:
        b = Block(header, var)
        self.stack[-1].add(b)
        self.stack.append(b)
        try:
            yield b
        finally:
            self.stack.pop()

    def lookup(self, key: Any) -> Any:
        for b in reversed(self.stack):
            if key in b.cache:
                return b.cache[key]
        return None

    def remember(self, key: Any, value: Any) -> None:
        self.stack[-1].cache[key] = value

    def depth_for(self, exprs: Sequence[Expr | str]) -> int:
        """The innermost open block whose loop variable one of ``exprs`` reads (0: the root):
        by the variables an IR expression names, or the identifiers of a template's text."""
        used: frozenset[str] = frozenset()
        for e in exprs:
            used |= names_in(e)
        for depth in range(len(self.stack) - 1, 0, -1):
            var = self.stack[depth].var
            if var is not None and var in used:
                return depth
        return 0

    @contextmanager
    def at_depth(self, depth: int) -> Iterator[None]:
        """Emit into ``stack[depth]``, just before the block that is open inside it."""
        if depth >= len(self.stack) - 1:
            yield
            return
        saved = self.stack
        target = saved[depth]
        # just before the open block, found by identity: an enclosing ``at_depth`` may have
        # left ``insert_at`` *after* it (a normaliser's statistics computed while another
        # normaliser's statistics loop is being written)
        pos = next(k for k, it in enumerate(target.items) if it is saved[depth + 1])
        old = target.insert_at
        target.insert_at = pos
        self.stack = saved[: depth + 1]
        try:
            yield
        finally:
            self.stack = saved
            added = target.insert_at - pos
            target.insert_at = None if old is None else old + added if old > pos else old

    def render(self, indent: int = 1, dialect: Any = None) -> str:
        return "\n".join(self.root.render(indent, dialect))
