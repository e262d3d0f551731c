"""Import-only stand-in for Hugging Face transformers, for fastDP on vision
models where no transformers package can be installed (bench/peers.sh puts
this directory on PYTHONPATH only when `import transformers` fails).

fastDP imports transformers at load time for its language-model support:
it registers per-sample rules for transformers' Conv1D and T5LayerNorm and
swaps the forwards of GPT-2, T5, OPT … models, all found by type. Every
name asked of this package is a fresh empty class, so those type tests
never match a torchvision module and fastDP's vision path (Conv2d, Linear,
GroupNorm, LayerNorm) runs unchanged. Nothing here computes anything.
"""

_placeholders = {}


def placeholder(module, name):
    """Returns the empty class standing for module.name (one per name)."""
    key = module + "." + name
    if key not in _placeholders:
        _placeholders[key] = type(name, (), {"__module__": module, "__doc__": "placeholder: no transformers installed"})
    return _placeholders[key]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return placeholder(__name__, name)
