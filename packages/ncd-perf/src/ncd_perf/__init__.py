"""ncd-perf: multi-level performance models derived from ncd models."""

__all__: list[str] = []
