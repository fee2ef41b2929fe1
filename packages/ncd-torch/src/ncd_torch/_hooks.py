"""Entry point of the ncd-torch plugin: registrations only, no heavy imports."""

from __future__ import annotations
