"""The ``ncd`` command: a thin shell over library calls. Plugins add subcommands by hook."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ncd.errors import NcdError

__all__ = ["BUILTIN_MODELS", "add_model_arguments", "load_model", "main", "parse_sizes"]


def _builtin_models() -> dict[str, Any]:
    from ncd import nn, ops

    return {
        "gpt": lambda: nn.gpt(layers=2),
        "gpt12": lambda: nn.gpt(layers=12),
        "block": lambda: nn.transformer_block(),
        "attention": lambda: ops.einsum("q d, x d -> q x") >> ops.softmax("x")
        >> ops.einsum("q x, x v -> q v"),
        "spherical_attention": lambda: nn.spherical_attention(),
        "mha": lambda: nn.multihead_attention(),
        "mlp": lambda: nn.mlp(),
    }


BUILTIN_MODELS = ("gpt", "gpt12", "block", "attention", "spherical_attention", "mha", "mlp")


def load_model(spec: str, bind: Sequence[str] = ()) -> Any:
    """A model from a built-in name, ``module:attribute`` (a term or a function returning one)
    or a ``.json`` file; ``bind`` holds ``label=size`` strings."""
    from ncd import Term, from_json

    models = _builtin_models()
    if spec in models:
        model = models[spec]()
    elif spec.endswith(".json") and os.path.exists(spec):
        with open(spec, "rb") as f:
            model = from_json(f.read())
    elif ":" in spec:
        mod, _, attr = spec.partition(":")
        sys.path.insert(0, os.getcwd())
        obj: Any = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
        model = obj if isinstance(obj, Term) else obj()
        if not isinstance(model, Term):
            raise NcdError(f"{spec} is not an ncd model (got {type(model).__name__})")
    else:
        raise NcdError(
            f"unknown model {spec!r}: use one of {', '.join(models)}, module:attribute or a .json file"
        )
    sizes = parse_sizes(bind)
    return model.bind(**sizes) if sizes else model


def parse_sizes(items: Sequence[str]) -> dict[str, int]:
    """``["seq=16", "heads=4"]`` -> ``{"seq": 16, "heads": 4}`` (command-line size lists)."""
    sizes = {}
    for item in items:
        label, eq, value = item.partition("=")
        if not eq or not value.isdigit():
            raise NcdError(f"expected LABEL=INT, got {item!r}")
        sizes[label] = int(value)
    return sizes


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """``MODEL`` and ``--bind label=size`` (shared by every command that takes a model)."""
    p.add_argument("model", help=f"built-in ({', '.join(BUILTIN_MODELS)}), module:attr or file.json")
    p.add_argument("--bind", nargs="*", default=[], metavar="LABEL=SIZE", help="bind free sizes")


def _cmd_plugins(args: argparse.Namespace) -> int:
    from ncd.plugins import registry

    reg = registry()
    print(f"{'plugin':<12} {'distribution':<14} {'version':<9} status / hooks")
    for p in reg.plugins:
        print(f"{p.name:<12} {p.distribution:<14} {p.version:<9} {p.status}")
        if p.hooks:
            print(f"{'':<37} {', '.join(p.hooks)}")
    print()
    for title, table in (("backends", reg.backends), ("exporters", reg.exporters),
                         ("renderers", reg.renderers), ("cost models", reg.cost_models),
                         ("commands", reg.commands)):
        print(f"{title}: {', '.join(sorted(table)) or '(none)'}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.bind)
    print(model.explain())
    print()
    print(model.config())
    return 0


def _cmd_json(args: argparse.Namespace) -> int:
    from ncd import to_json

    text = to_json(load_model(args.model, args.bind), indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from ncd._demo import demo

    return demo(args.out, layers=args.layers)


def build_parser() -> argparse.ArgumentParser:
    from ncd.plugins import registry

    parser = argparse.ArgumentParser(prog="ncd", description="neural circuit diagrams toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="build a GPT, configure, run and interpret it with every plugin")
    p.add_argument("--out", default="ncd-demo", help="folder for files the demo writes")
    p.add_argument("--layers", type=int, default=2)
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("plugins", help="list installed plugins, their versions and hooks")
    p.set_defaults(func=_cmd_plugins)
    p = sub.add_parser("explain", help="print a model's ops with core and loop axes, and its config")
    add_model_arguments(p)
    p.set_defaults(func=_cmd_explain)
    p = sub.add_parser("json", help="write a model as interchange JSON")
    add_model_arguments(p)
    p.add_argument("-o", "--output")
    p.set_defaults(func=_cmd_json)
    for cmd in registry().commands.values():
        p = sub.add_parser(cmd.name, help=cmd.help)
        cmd.configure(p)
        p.set_defaults(func=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NcdError as e:
        print(f"ncd: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
