"""Entry point: registers the ``pysource`` backend (imports nothing heavy)."""

from ncd.plugins import Backend, hookimpl


@hookimpl
def ncd_register_backends() -> list[Backend]:
    from ncd_example_backend.codegen import PySourceBackend

    return [PySourceBackend()]
