"""FastRL: MDAP + ARS plug-ins for GRPO-family trainers."""

__version__ = "0.1.0"
