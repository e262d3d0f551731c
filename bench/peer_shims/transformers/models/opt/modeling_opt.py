"""Placeholder for transformers.models.opt.modeling_opt (see transformers/__init__.py)."""
from transformers import placeholder


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return placeholder(__name__, name)
