"""Placeholder for transformers.models.t5.modeling_t5 (see transformers/__init__.py)."""
from transformers import placeholder


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return placeholder(__name__, name)
