"""opcost: what each operator of a PyTorch model costs, and whether the costs add up to the model."""

__version__ = "0.1.0"
