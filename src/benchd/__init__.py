"""benchd: continuous, exact measurement of LLM generation speed."""

__version__ = "0.1.0"
