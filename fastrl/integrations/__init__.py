"""Adapters that put FastRL's registered components into other trainers (optional extras)."""
