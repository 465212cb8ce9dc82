"""Facts about the installed torch, read from its files without importing it."""

from __future__ import annotations

from distdoctor.facts import fact  # noqa: F401
