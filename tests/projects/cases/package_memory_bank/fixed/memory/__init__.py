from .bank import MemoryBank

__all__ = ["MemoryBank"]
