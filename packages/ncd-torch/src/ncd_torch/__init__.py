"""ncd-torch: ncd models to PyTorch modules and back."""

__all__: list[str] = []
