"""specchat: local LLM chat made faster by exact speculative decoding."""

__version__ = "0.1.0"
