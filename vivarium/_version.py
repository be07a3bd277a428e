"""The package's version: one place, read by setuptools at build time (``pyproject.toml``).

It is also recorded in every trace's run metadata and sent in the LLM gateway's User-Agent.
"""

__version__ = "0.1.0"
