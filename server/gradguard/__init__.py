"""GradGuard: finds PyTorch autograd-graph bugs before the code runs."""

__version__ = "0.1.0"
