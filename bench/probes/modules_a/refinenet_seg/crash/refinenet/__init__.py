from .refinenet import RefineNet4Cascade
