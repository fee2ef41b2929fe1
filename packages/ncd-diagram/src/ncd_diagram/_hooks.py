"""Entry point of the ncd-diagram plugin: registrations only, no heavy imports."""

from __future__ import annotations

from ncd.plugins import hookimpl
from ncd.plugins.interfaces import Command, DemoStep, Renderer


@hookimpl
def ncd_register_renderers() -> list[Renderer]:
    from ncd_diagram.plugin import DiagramRenderer, GraphvizRenderer

    return [DiagramRenderer(), GraphvizRenderer()]


@hookimpl
def ncd_register_commands() -> list[Command]:
    from ncd_diagram.plugin import configure_draw, run_draw

    return [
        Command(
            "draw",
            "draw a model as a neural circuit diagram (svg, png, pdf, dot, json)",
            configure_draw,
            run_draw,
        )
    ]


@hookimpl
def ncd_demo_steps() -> list[DemoStep]:
    from ncd_diagram.plugin import demo_step

    return [DemoStep("diagram: the transformer drawn as a neural circuit diagram", 30, demo_step)]
