"""Adapters that plug ``Conductor-v0`` into other libraries (trl, ...)."""
