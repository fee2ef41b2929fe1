"""Finding 6, command line: a plugin command that clashes with a built-in or another plugin, or
whose ``configure`` or ``run`` fails, never breaks the other ``ncd`` subcommands; ``ncd plugins``
lists overrides and collisions with both owners."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
from plugin_fakes import Fakes, backend_source, load

from ncd.cli import main
from ncd.plugins import PluginWarning


def command_source(
    name: str,
    *,
    configure: str = "p.add_argument('--n', type=int)",
    run: str = "print('ran', args.n); return 0",
) -> str:
    return f"""
        from ncd.plugins import Command, hookimpl

        def configure(p):
            {configure}

        def run(args):
            {run}

        @hookimpl
        def ncd_register_commands():
            return [Command({name!r}, "a plugin command", configure, run)]
    """


def ncd(capsys: pytest.CaptureFixture[str], *args: str, **settings: Any) -> tuple[int, str, str]:
    """``ncd ARGS`` in this process, on a freshly loaded registry."""
    load(**settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def still_works(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = ncd(capsys, "explain", "attention", "--bind", "q=7")
    assert code == 0 and "softmax: [x -> x] over (q)" in out


@pytest.mark.parametrize("name", ["demo", "plugins", "explain", "json"])
def test_a_plugin_command_named_like_a_core_one_loses_and_is_reported(
    fakes: Fakes, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    fakes.add("cmd-thief", command_source(name, run="raise SystemExit(99)"))
    still_works(capsys)
    code, out, _ = ncd(capsys, "plugins")
    assert (
        code == 0 and f"command {name!r} is claimed by ncd-core" in out and "cmd-thief 1.0" in out
    )


def test_a_second_compile_command_is_reported_not_dropped(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes.add("my-compiler", command_source("compile"))
    reg, warned = load()
    owner = reg.owner("command", "compile")
    assert owner is not None and owner.builtin
    assert any("command 'compile'" in m and "my-compiler 1.0" in m for m in warned)


@pytest.mark.parametrize(
    "configure",
    [
        "raise ImportError('no module named yaml')",
        "import sys; sys.exit(1)",
        "p.add_argument('-h')",
    ],
)  # clashes with --help
def test_a_command_whose_configure_fails_gets_a_stub(
    fakes: Fakes, capsys: pytest.CaptureFixture[str], configure: str
) -> None:
    fakes.add("cfg-broken", command_source("broken", configure=configure))
    still_works(capsys)
    code, _, err = ncd(capsys, "broken", "--n", "3")
    assert code == 2 and "command 'broken' of cfg-broken 1.0" in err and "unavailable" in err
    assert "Traceback" not in err


def test_a_command_whose_run_fails_names_its_plugin(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes.add("run-broken", command_source("crash", run="return 1 / args.n"))
    code, out, err = ncd(capsys, "crash", "--n", "0")
    assert code == 1 and "ZeroDivisionError" in err and "Traceback" in err
    assert "ncd: error: command 'crash' of run-broken 1.0 (plugin 'run-broken') failed" in err
    code, out, _ = ncd(capsys, "crash", "--n", "4")
    assert code == 0 and out == ""  # 1 / 4 is a float: int() gives exit code 0


def test_a_command_raising_an_ncd_error_prints_one_line(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes.add(
        "run-input",
        command_source(
            "picky", run="import ncd; raise ncd.SizeError('n must be even. Fix: pass --n 2')"
        ),
    )
    code, _, err = ncd(capsys, "picky", "--n", "3")
    assert code == 2 and "ncd: error: n must be even" in err and "run-input 1.0" in err
    assert "Traceback" not in err


def test_a_command_raising_a_plugin_error_is_still_named(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PluginError of the plugin's own (no cause) is bad input too: one line, and the note
    naming the plugin is printed as for every other NcdError."""
    fakes.add(
        "run-plugin-error",
        command_source(
            "needy", run="import ncd; raise ncd.PluginError('needs a GPU. Fix: pass --n 0')"
        ),
    )
    code, _, err = ncd(capsys, "needy", "--n", "3")
    assert code == 2 and "ncd: error: needs a GPU" in err and "run-plugin-error 1.0" in err
    assert "Traceback" not in err


def test_two_third_party_commands_on_one_name_are_refused(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes.add("cmd-one", command_source("twin"))
    fakes.add("cmd-two", command_source("twin"))
    still_works(capsys)
    code, _, err = ncd(capsys, "twin", "--n", "1")
    assert code == 2 and "cmd-one 1.0" in err and "cmd-two 1.0" in err
    assert "NCD_PLUGIN_PREFER=twin=" in err
    assert ncd(capsys, "twin", "--n", "5", prefer={"twin": "cmd-two"})[:2] == (0, "ran 5\n")


def test_ncd_plugins_lists_an_override_and_a_collision(fakes: Fakes) -> None:
    """Through a real ``ncd`` process, with the user's choice in the environment."""
    fakes.add("my-ref", backend_source("reference", override=True))
    fakes.add("cmd-thief", command_source("json"))
    env = dict(
        os.environ,
        NCD_PLUGIN_PREFER="reference=my-ref",
        PYTHONPATH=os.pathsep.join([str(fakes.root), os.environ.get("PYTHONPATH", "")]),
    )
    r = subprocess.run(
        [sys.executable, "-m", "ncd.cli", "plugins"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    over = r.stdout[r.stdout.index("overrides") :]
    assert "backend 'reference': my-ref 1.0 (plugin 'my-ref') replaces ncd-core" in over
    assert "command 'json' is claimed by ncd-core" in over and "cmd-thief 1.0" in over
    assert "backends: " in r.stdout and "reference (my-ref)" in r.stdout
    assert "PluginWarning" in r.stderr  # each collision warned about, on stderr


def handler_source(target: str, marker: str) -> str:
    return f"""
        from ncd.plugins import Command, hookimpl
        from ncd.cli import add_model_arguments

        def configure(p):
            add_model_arguments(p)
            p.add_argument("--shout", action="store_true")

        def run(args):
            print({marker!r}, args.model, args.target, args.shout)
            return 0

        @hookimpl
        def ncd_register_commands():
            return [Command("compile", "compile for {target}", configure, run, target={target!r})]
    """


def test_ncd_compile_dispatches_by_target(fakes: Fakes, capsys: pytest.CaptureFixture[str]) -> None:
    fakes.add("mine-backend", handler_source("mine", "mine-handler"))
    code, out, _ = ncd(capsys, "compile", "attention", "--target", "mine", "--shout")
    assert code == 0 and out == "mine-handler attention mine True\n"
    code, out, _ = ncd(capsys, "compile", "attention", "--bind", "q=7", "--target", "reference")
    assert code == 0 and "compiled attention (3 ops) for 'reference'" in out
    code, _, err = ncd(capsys, "compile", "attention", "--target", "nope")
    assert code == 2 and "no backend named 'nope'" in err


def test_a_second_compile_handler_for_opencl_is_reported_and_loses(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ncd_opencl")
    fakes.add("cl-thief", handler_source("opencl", "stolen"))
    _, warned = load()
    assert any(
        "command 'compile/opencl'" in m and "cl-thief 1.0" in m and "ncd-opencl" in m
        for m in warned
    )
    code, out, _ = ncd(
        capsys,
        "compile",
        "attention",
        "--bind",
        "q=13",
        "x=7",
        "d=5",
        "v=3",
        "--target",
        "opencl",
        "--fuse",
        "none",
    )
    assert code == 0 and "OpenCL kernel(s)" in out and "stolen" not in out


def test_two_compile_handlers_for_one_third_party_target_are_refused(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes.add("h-one", handler_source("shared", "one"))
    fakes.add("h-two", handler_source("shared", "two"))
    code, _, err = ncd(capsys, "compile", "attention", "--target", "shared")
    assert code == 2 and "h-one 1.0" in err and "h-two 1.0" in err
    code, out, _ = ncd(
        capsys, "compile", "attention", "--target", "shared", prefer={"compile/shared": "h-one"}
    )
    assert code == 0 and out.startswith("one attention shared")
