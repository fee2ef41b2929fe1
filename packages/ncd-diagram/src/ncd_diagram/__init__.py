"""ncd-diagram: neural circuit diagrams (SVG, DOT, JSON) drawn from ncd models."""

__all__: list[str] = []
