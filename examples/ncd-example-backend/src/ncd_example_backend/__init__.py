"""An example third-party ncd backend: models compiled to straight-line NumPy source."""

from ncd_example_backend.codegen import PySourceBackend, PySourceExecutable, generate

__all__ = ["PySourceBackend", "PySourceExecutable", "generate"]
