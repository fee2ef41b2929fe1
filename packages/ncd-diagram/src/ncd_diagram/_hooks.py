"""Entry point of the ncd-diagram plugin: registrations only, no heavy imports."""

from __future__ import annotations
