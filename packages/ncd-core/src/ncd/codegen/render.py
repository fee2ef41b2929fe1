"""The C-style renderer: loop IR (``ncd.codegen.ir``) to text, every target token asked of the
``Dialect`` (type names, literals, intrinsics by name and dtype, loads and stores by format,
vector types and lanes). OpenCL and CUDA differ only in the dialect they pass."""

from __future__ import annotations

from ncd.codegen import ir
from ncd.codegen.dialect import Dialect

__all__ = ["render_expr", "render_stmt", "type_name"]

_INDEX_TYPES = {"int32": "int", "uint32": "unsigned int"}


def type_name(t: str, dialect: Dialect) -> str:
    """The C spelling of an IR type: a storage type, an index type, a vector of floats, or a
    pointer to one of these."""
    if t.endswith("*"):
        return type_name(t[:-1], dialect) + "*"
    base, lanes = ir.lanes_of(t)
    if lanes > 1:
        return dialect.vector(dialect.ctype(base), lanes)
    if base == "int64":
        return dialect.index64
    if base in _INDEX_TYPES:
        return _INDEX_TYPES[base]
    return dialect.ctype(base)


def _const(e: ir.Const, dialect: Dialect) -> str:
    base, lanes = ir.lanes_of(e.type)
    if base.startswith("float"):
        value = float(e.value) if isinstance(e.value, int) else e.value
        text = dialect.literal(value, base)
        return f"(({type_name(e.type, dialect)})({text}))" if lanes > 1 else text
    if base == "uint32":
        return f"{e.value}u"
    return str(e.value)


#: C's binding strength of each binary operator (higher binds tighter).
_PREC = {
    "*": 13, "/": 13, "%": 13, "+": 12, "-": 12, "<<": 11, ">>": 11,
    "<": 10, "<=": 10, ">": 10, ">=": 10, "==": 9, "!=": 9,
    "&": 8, "^": 7, "|": 6, "&&": 5, "||": 4,
}  # fmt: skip
_UNARY, _SELECT, _ATOM = 14, 3, 16


def render_expr(e: ir.Expr, dialect: Dialect) -> str:
    """The text of expression ``e`` in ``dialect``, parenthesised where C's precedence needs
    it (operators group to the left as written: ``a + (b + c)`` keeps its parentheses, since
    float addition does not associate)."""
    return _expr(e, dialect, 0)


def _wrap(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text


def _expr(e: ir.Expr, dialect: Dialect, need: int) -> str:
    r = _expr
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Raw):
        text = e.text
        atom = text.isidentifier() or text.isdigit()
        return text if atom or need == 0 else f"({text})"
    if isinstance(e, ir.Const):
        text = _const(e, dialect)
        return _wrap(text, _UNARY if text.startswith("-") else _ATOM, need)
    if isinstance(e, ir.Bin):
        p = _PREC[e.op]
        # the right operand binds tighter: ``a - (b - c)``, ``a / (b * c)`` keep their grouping
        text = f"{r(e.a, dialect, p)} {e.op} {r(e.b, dialect, p + 1)}"
        return _wrap(text, p, need)
    if isinstance(e, ir.Un):
        return _wrap(f"{e.op}{r(e.a, dialect, _UNARY)}", _UNARY, need)
    if isinstance(e, ir.Call):
        args = ", ".join(r(a, dialect, 0) for a in e.args)
        return f"{dialect.intrinsic(e.fn, ir.lanes_of(e.type)[0])}({args})"
    if isinstance(e, ir.Select):
        c, a = r(e.cond, dialect, _SELECT + 1), r(e.a, dialect, 0)
        text = f"{c} ? {a} : {r(e.b, dialect, _SELECT)}"
        return _wrap(text, _SELECT, need)
    if isinstance(e, ir.Convert | ir.Broadcast):
        return _wrap(f"({type_name(e.type, dialect)})({r(e.x, dialect, 0)})", _UNARY, need)
    if isinstance(e, ir.Elem):
        return f"{e.array}[{r(e.index, dialect, 0)}]"
    if isinstance(e, ir.Lane):
        return dialect.lane(r(e.x, dialect, _ATOM), e.k)
    if isinstance(e, ir.Round):
        vector = ir.lanes_of(e.type)[1] > 1
        return dialect.round(e.dtype, r(e.x, dialect, 0), vector)
    if isinstance(e, ir.Load):
        return _load(e, dialect)
    raise TypeError(f"no rendering for IR node {e!r}")


def _vector_pointer(dialect: Dialect, buf: str, addr: str, dtype: str, const: bool) -> str:
    # a pointer cast, not vloadN: PoCL compiles vloadN to a library call
    t = dialect.unaligned_vector or dialect.vector(dialect.ctype(dtype), dialect.vector_width)
    q = f" {dialect.const}" if const else ""
    return f"*({dialect.global_}{q} {t}*)({buf} + {addr})"


def _offset(addr: ir.Expr, dialect: Dialect) -> str:
    """An element offset as the right operand of ``pointer + offset``."""
    return _expr(addr, dialect, _PREC["+"] + 1)


def _load(e: ir.Load, dialect: Dialect) -> str:
    addr = _offset(e.addr, dialect) if e.lanes > 1 else render_expr(e.addr, dialect)
    if e.lanes > 1 and e.dtype != "float32":  # a reduced format, converted
        got = dialect.vector_load(e.dtype, f"{e.buf} + {addr}", dialect.global_)
        if got is None:
            raise TypeError(f"the {dialect.name} dialect has no vector loads of {e.dtype}")
        return f"({got})"
    if e.lanes > 1:  # unit stride along the vector axis (checked by the vector template)
        return f"({_vector_pointer(dialect, e.buf, addr, e.dtype, e.const)})"
    scalar = dialect.load(e.dtype, e.buf, addr)
    if ir.lanes_of(e.type)[1] > 1:  # a scalar read in a vector loop: every lane holds it
        return f"(({type_name(e.type, dialect)})({scalar}))"
    return scalar


def render_stmt(s: ir.Stmt, dialect: Dialect) -> str:
    """The text of statement ``s`` (a loop or guard: its head, without the brace)."""
    r = render_expr
    if isinstance(s, ir.Decl):
        const = "const " if s.const else ""
        return f"{const}{type_name(s.var.type, dialect)} {s.var.name} = {r(s.init, dialect)};"
    if isinstance(s, ir.Array):
        return f"{type_name(s.type, dialect)} {s.name}[{s.n}];"
    if isinstance(s, ir.Assign):
        return f"{r(s.target, dialect)} {s.op} {r(s.value, dialect)};"
    if isinstance(s, ir.Store):
        addr = _offset(s.addr, dialect) if s.lanes > 1 else r(s.addr, dialect)
        value = r(s.value, dialect)
        if s.lanes > 1 and s.dtype != "float32":
            put = dialect.vector_store(s.dtype, f"{s.buf} + {addr}", dialect.global_, value)
            if put is None:
                raise TypeError(f"the {dialect.name} dialect has no vector stores of {s.dtype}")
            return put
        if s.lanes > 1:
            return f"{_vector_pointer(dialect, s.buf, addr, s.dtype, False)} = {value};"
        return dialect.store(s.dtype, s.buf, addr, value)
    if isinstance(s, ir.For):
        v, stop = s.var, r(s.stop, dialect)
        step = f"++{v.name}"
        if not (isinstance(s.step, int) and s.step == 1):
            step = f"{v.name} += {s.step if isinstance(s.step, int) else r(s.step, dialect)}"
        head = f"{type_name(v.type, dialect)} {v.name} = {r(s.start, dialect)}"
        return f"for ({head}; {v.name} < {stop}; {step})"
    if isinstance(s, ir.If):
        return f"if ({r(s.cond, dialect)})"
    raise TypeError(f"no rendering for IR statement {s!r}")
