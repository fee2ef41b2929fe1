"""The ``ncd`` command: a thin shell over library calls. Plugins add subcommands by hook."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ncd.errors import NcdError, PluginError
from ncd.plugins.attribution import call
from ncd.plugins.interfaces import Command
from ncd.plugins.precedence import Owner, PluginWarning
from ncd.plugins.registrations import TARGETED_COMMANDS

__all__ = [
    "BUILTIN_MODELS",
    "CORE_COMMANDS",
    "add_model_arguments",
    "build_parser",
    "load_model",
    "main",
    "parse_sizes",
    "parse_tiles",
]


def _builtin_models() -> dict[str, Any]:
    from ncd import nn, ops

    return {
        "gpt": lambda: nn.gpt(layers=2),
        "gpt12": lambda: nn.gpt(layers=12),
        "block": lambda: nn.transformer_block(),
        "attention": lambda: (
            ops.einsum("q d, x d -> q x") >> ops.softmax("x") >> ops.einsum("q x, x v -> q v")
        ),
        "spherical_attention": lambda: nn.spherical_attention(),
        "mha": lambda: nn.multihead_attention(),
        "mlp": lambda: nn.mlp(),
    }


BUILTIN_MODELS = ("gpt", "gpt12", "block", "attention", "spherical_attention", "mha", "mlp")


def load_model(spec: str, bind: Sequence[str] = ()) -> Any:
    """A model from a built-in name, ``module:attribute`` (a term or a function returning one)
    or a ``.json`` file; ``bind`` holds ``label=size`` strings."""
    from ncd import GradModel, Term, from_json

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
        model = obj if isinstance(obj, Term | GradModel) else obj()
        if not isinstance(model, Term | GradModel):  # a gradient model draws, explains...
            raise NcdError(f"{spec} is not an ncd model (got {type(model).__name__})")
    else:
        raise NcdError(
            f"unknown model {spec!r}: use one of {', '.join(models)}, module:attribute or a "
            ".json file"
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
    p.add_argument(
        "model", help=f"built-in ({', '.join(BUILTIN_MODELS)}), module:attr or file.json"
    )
    p.add_argument("--bind", nargs="*", default=[], metavar="LABEL=SIZE", help="bind free sizes")


def _cmd_plugins(args: argparse.Namespace) -> int:
    from ncd.plugins import registry

    reg = registry()
    rows = [(p.name, p.distribution, p.version, p.status) for p in reg.plugins]
    w = [
        max(len(h), *(len(r[i]) for r in rows))
        for i, h in enumerate(("plugin", "distribution", "version"))
    ]
    print(f"{'plugin':<{w[0]}}  {'distribution':<{w[1]}}  {'version':<{w[2]}}  status / hooks")
    for p in reg.plugins:
        print(f"{p.name:<{w[0]}}  {p.distribution:<{w[1]}}  {p.version:<{w[2]}}  {p.status}")
        if p.hooks:
            print(f"{' ' * (sum(w) + 6)}{', '.join(p.hooks)}")
    print()
    for kind, table in reg.tables.items():
        names = [_labelled(n, reg.owner(kind, n)) for n in sorted(table)]
        names += [f"{n} (refused)" for n in sorted(reg.refused(kind))]
        print(f"{kind}s: {', '.join(names) or '(none)'}")
    if reg.overrides:
        print("\noverrides (a third party replaces a built-in, as the user allowed):")
        for c in reg.overrides:
            print(
                f"  {c.kind} {c.name!r}: {c.winner.describe() if c.winner else '?'} replaces "
                f"{' and '.join(o.describe() for o in c.builtins)}"
            )
    if reg.collisions:
        print("\ncollisions:")
        for c in reg.collisions:
            print(f"  {c.describe()}")
    return 0


def _labelled(name: str, owner: Any) -> str:
    """A name, with its distribution when a third party provides it."""
    return name if owner is None or owner.builtin else f"{name} ({owner.distribution})"


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


def _cmd_compile(args: argparse.Namespace) -> int:
    """``ncd compile MODEL --target NAME ...``: the rest of the line goes to the handler that
    backend registered (``Command(..., target=NAME)``), or to a generic one that compiles."""
    from ncd.plugins import registry

    reg = registry()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--target")
    known, rest = pre.parse_known_args(args.rest)
    handlers = {c.target: c for c in reg.commands.values() if c.name == "compile" and c.target}
    target = known.target
    if target is None:
        if len(handlers) != 1:
            raise NcdError(
                f"ncd compile needs --target NAME (backends: "
                f"{', '.join(sorted(reg.backends))}; with their own options: "
                f"{', '.join(sorted(handlers)) or 'none'}). Fix: add --target NAME."
            )
        target = next(iter(handlers))
    refused = reg.refused("command").get(f"compile/{target}")
    if refused is not None:
        raise PluginError(refused.refusal())
    handler = handlers.get(target)
    if handler is None:
        reg.backend(target)  # an unknown target fails here, naming the installed ones
        handler = Command(
            "compile",
            f"compile a model for the {target} backend",
            add_model_arguments,
            _compile_generic,
            target=target,
        )
    owner = reg.owner("command", f"compile/{target}")
    p = argparse.ArgumentParser(prog=f"ncd compile --target {target}", description=handler.help)
    what = f"command 'compile --target {target}'"
    call(owner, f"{what}: configure", handler.configure, p)
    parsed = p.parse_args(rest)
    parsed.target = target
    return int(call(owner, what, handler.run, parsed) or 0)


def _compile_generic(args: argparse.Namespace) -> int:
    from ncd.api import compile

    model = load_model(args.model, args.bind)
    exe = compile(model, args.target)
    print(f"compiled {args.model} ({len(model.graph.nodes)} ops) for {args.target!r}: {exe!r}")
    return 0


def _configure_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="ncd-demo", help="folder for files the demo writes")
    p.add_argument("--layers", type=int, default=2)


def _configure_train(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--targets", nargs="+", default=["torch"], help="backends; the first is the base"
    )
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--val-every", type=int, default=50, help="0: only at the end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", metavar="FILE.json", help="write the loss curves there")


def _cmd_train(args: argparse.Namespace) -> int:
    from ncd.training import train_char_gpt

    train_char_gpt(
        args.targets, steps=args.steps, layers=args.layers, d_model=args.d_model,
        heads=args.heads, seq=args.seq, batch=args.batch, val_every=args.val_every,
        seed=args.seed, save=args.save,
    )  # fmt: skip
    return 0


def _configure_tune(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("--target", default="opencl", help="a backend declaring 'tune' (opencl)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds of measuring")
    p.add_argument("--candidates", type=int, default=6, help="measured per distinct kernel")
    p.add_argument("--reps", type=int, default=5, help="launches per kernel and candidate")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")


def _cmd_tune(args: argparse.Namespace) -> int:
    from ncd.tuning import cache_dir, tune

    model = load_model(args.model, args.bind)
    report = tune(
        model,
        args.target,
        budget=args.budget,
        candidates=args.candidates,
        reps=args.reps,
        cache=not args.no_cache,
    )
    print(report)
    if not args.no_cache:
        print(f"tuning cache: {cache_dir()}")
    return 0


def _configure_bench(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("--target", default="opencl", help="a backend declaring 'tune' (opencl)")
    p.add_argument(
        "--tiles",
        nargs="*",
        default=[],
        metavar="[KERNEL:]AXIS[@LEVEL]=TILE",
        help="tiles of the plan (ncd.plan tiles=), e.g. x@0=64 'k*_einsum*:seq@1=2'",
    )
    p.add_argument("--tuned", action="store_true", help="the plan ncd.tune picks (cached)")
    p.add_argument("--reps", type=int, default=5, help="launches per kernel (median)")
    p.add_argument("--machine", help="ncd-perf machine to predict on (default: the target's)")


def parse_tiles(items: Sequence[str]) -> dict[Any, int]:
    """``["x@0=64", "k*_einsum*:seq@1=2", "d=8"]`` -> ``ncd.plan`` ``tiles=`` keys."""
    out: dict[Any, int] = {}
    for item in items:
        key, eq, value = item.rpartition("=")
        pattern, _, name = key.rpartition(":") if ":" in key else ("", "", key)
        axis, at, level = name.partition("@")
        if not eq or not axis or not value.isdigit() or (at and not level.isdigit()):
            raise NcdError(
                f"--tiles {item!r}: expected [KERNEL:]AXIS[@LEVEL]=TILE, e.g. x@0=64. Fix: "
                "name the axis, optionally its level and a kernel-name pattern, then the tile."
            )
        if pattern:
            out[(pattern, axis, int(level or 0))] = int(value)
        elif at:
            out[(axis, int(level))] = int(value)
        else:
            out[axis] = int(value)
    return out


def _cmd_bench(args: argparse.Namespace) -> int:
    from ncd.bench import bench
    from ncd.tuning import tune

    model = load_model(args.model, args.bind)
    tiles = parse_tiles(args.tiles)
    plan = tune(model, args.target).plan if args.tuned else None
    if plan is not None and tiles:
        raise NcdError("ncd bench: --tuned chooses the tiles; drop --tiles (or --tuned).")
    report = bench(
        model, args.target, plan=plan, tiles=tiles or None, reps=args.reps, machine=args.machine
    )
    print(report)
    return 0 if report.agrees else 1


def _configure_json(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("-o", "--output")


def _no_arguments(p: argparse.ArgumentParser) -> None:
    return None


#: The core's subcommands, registered by ncd-core's own plugin (``ncd.plugins._builtin``).
CORE_COMMANDS = (
    Command(
        "demo",
        "build a GPT, configure, run and interpret it with every plugin",
        _configure_demo,
        _cmd_demo,
    ),
    Command(
        "plugins",
        "list installed plugins, their versions, hooks, overrides and collisions",
        _no_arguments,
        _cmd_plugins,
    ),
    Command(
        "explain",
        "print a model's ops with core and loop axes, and its config",
        add_model_arguments,
        _cmd_explain,
    ),
    Command("json", "write a model as interchange JSON", _configure_json, _cmd_json),
    Command(
        "train",
        "train a character-level GPT on CPython's help text on one or more backends",
        _configure_train,
        _cmd_train,
    ),
    Command(
        "bench",
        "time a model's kernels on a backend's device beside ncd-perf's prediction",
        _configure_bench,
        _cmd_bench,
    ),
    Command(
        "tune",
        "search a backend's kernel schedules on its device and cache the fastest",
        _configure_tune,
        _cmd_tune,
    ),
    Command(
        "compile",
        "compile a model for a backend: MODEL --target NAME, then that "
        "backend's options (ncd compile --target NAME -h lists them)",
        _no_arguments,
        _cmd_compile,
    ),
)


def _add_command(sub: Any, cmd: Command, owner: Owner | None) -> None:
    """One subcommand. ``configure`` fills a scratch parser first, so a plugin whose
    ``configure`` raises leaves no half-built subcommand: it gets a stub that says why."""
    scratch = argparse.ArgumentParser(add_help=False)
    try:
        call(owner, f"command {cmd.name!r}: configure", cmd.configure, scratch)
        p = sub.add_parser(cmd.name, help=cmd.help, parents=[scratch])
    except (Exception, SystemExit) as e:  # argparse reports its own misuse by SystemExit
        cause = e.__cause__ if isinstance(e, PluginError) and e.__cause__ is not None else e
        where, fix = "", ""
        if owner is not None:
            where = f" of {owner.describe()}"
            fix = (
                f" Fix: report it to the authors of {owner.distribution}, or skip the plugin "
                f"with NCD_DISABLE_PLUGINS={owner.plugin}."
            )
        message = (
            f"command {cmd.name!r}{where} is unavailable: its configure() failed with "
            f"{type(cause).__name__}: {cause}.{fix}"
        )
        warnings.warn(f"ncd: {message}", PluginWarning, stacklevel=2)
        _add_stub(sub, cmd.name, message)
        return
    p.set_defaults(func=cmd.run, _ncd_owner=owner)


def _add_stub(sub: Any, name: str, message: str) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise PluginError(message)

    # the whole line is taken, so the error above is what the user sees, not argparse's
    # complaint about an unknown option
    _add_whole_line(sub, name, f"(unavailable) {message}", fail)


def _add_whole_line(
    sub: Any, name: str, help: str, run: Callable[[argparse.Namespace], int]
) -> None:
    """A subcommand that takes the rest of the line as ``args.rest``: no option prefix, so
    ``--n 3`` is taken too (a stub; ``compile``, whose options belong to a per-target handler)."""
    p = sub.add_parser(name, help=help, prefix_chars="\0", add_help=False)
    p.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=run, _ncd_owner=None)


def build_parser() -> argparse.ArgumentParser:
    from ncd.plugins import registry

    reg = registry()
    parser = argparse.ArgumentParser(prog="ncd", description="neural circuit diagrams toolkit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in reg.commands.values():
        if cmd.target is not None:
            continue  # reached through its core command (ncd compile --target ...)
        owner = reg.owner("command", cmd.name)
        if cmd.name in TARGETED_COMMANDS and owner is not None and owner.core:
            _add_whole_line(sub, cmd.name, cmd.help, cmd.run)
        else:
            _add_command(sub, cmd, owner)
    for name, collision in reg.refused("command").items():
        if "/" in name:
            continue  # reported by the dispatcher when that target is asked for
        _add_stub(sub, name, collision.refusal())
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Errors on bad input print one line (exit 2); a plugin's own bug
    prints its traceback and the plugin's name (exit 1); Ctrl-C exits 130."""
    try:
        args = build_parser().parse_args(argv)
        owner = getattr(args, "_ncd_owner", None)
        return int(call(owner, f"command {args.command!r}", args.func, args) or 0)
    except NcdError as e:
        # a PluginError caused by something else wraps a plugin's bug: show where it broke
        bug = (
            isinstance(e, PluginError)
            and e.__cause__ is not None
            and not isinstance(e.__cause__, NcdError)
        )
        if bug:
            traceback.print_exception(e.__cause__)
        print(f"ncd: error: {e}", file=sys.stderr)
        for note in getattr(e, "__notes__", ()):  # e.g. the plugin that raised it
            print(f"  ({note})", file=sys.stderr)
        return 1 if bug else 2
    except KeyboardInterrupt:
        print("ncd: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
