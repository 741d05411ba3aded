from .loop import Trainer

__all__ = ["Trainer"]
