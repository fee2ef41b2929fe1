"""Entry point of the ncd-perf plugin: registrations only, no heavy imports."""

from __future__ import annotations
