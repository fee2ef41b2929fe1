"""ncd-core's own plugin: the reference interpreter registered as the ``reference`` backend, a
``json`` exporter and the core subcommands (``demo``, ``plugins``, ``explain``, ``json``), through
the same hooks third-party plugins use, so a plugin claiming one of these names meets the same
precedence rule as any other collision (built-ins win)."""

from __future__ import annotations

from typing import Any, ClassVar

from ncd.plugins.hookspecs import hookimpl
from ncd.plugins.interfaces import Backend, Command, Executable, Exporter


class ReferenceExecutable(Executable):
    def __init__(self, model: Any, training: bool = False, seed: int = 0) -> None:
        self.model, self.training, self.seed = model, training, seed

    def __call__(self, *inputs: Any, params: Any = None) -> Any:
        from ncd.reference import run

        return run(self.model, *inputs, params=params, training=self.training, seed=self.seed)


class ReferenceBackend(Backend):
    name = "reference"
    capabilities: ClassVar[frozenset[str]] = frozenset({"float32", "float64", "training"})
    description = "the NumPy reference interpreter (ground truth)"

    def compile(self, model: Any, **options: Any) -> Executable:
        return ReferenceExecutable(model, **options)


class JsonExporter(Exporter):
    name = "json"
    description = "versioned interchange JSON"

    def export(self, model: Any, **options: Any) -> Any:
        from ncd.serialize import to_json

        return to_json(model, **options)


@hookimpl
def ncd_register_backends() -> list[Backend]:
    return [ReferenceBackend()]


@hookimpl
def ncd_register_exporters() -> list[Exporter]:
    return [JsonExporter()]


@hookimpl
def ncd_register_commands() -> list[Command]:
    from ncd import cli

    return list(cli.CORE_COMMANDS)
