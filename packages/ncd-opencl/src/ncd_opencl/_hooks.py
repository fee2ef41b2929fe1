"""Entry point of the ncd-opencl plugin: registrations only, no heavy imports."""

from __future__ import annotations
