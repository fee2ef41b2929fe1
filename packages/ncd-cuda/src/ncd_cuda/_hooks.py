"""Entry point of the ncd-cuda plugin: registrations only, no heavy imports."""

from __future__ import annotations
