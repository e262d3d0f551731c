"""Placeholder for transformers.utils: its logging is the standard library's."""
import logging as _logging


class logging:
    """transformers.utils.logging's get_logger, as fastDP uses it."""

    @staticmethod
    def get_logger(name=None):
        return _logging.getLogger(name)
