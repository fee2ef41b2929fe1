"""The op classes of ncd-core: attrs values with a template of axes, their JSON kinds and
validators, and nothing that builds terms. The front end (``ncd.ops``, ``ncd.nn``) makes terms
from them; the low layers (the reference interpreter, streaming roles, code generation, cost
models) read them, without importing the front end. ``library`` holds the built-in ops,
``routing`` the mixture-of-experts ops (imported by ``ncd.nn``; it registers its own rules)."""

from ncd.primitives import library

__all__ = ["library"]
