"""Facts for the 'gpu' area."""

from __future__ import annotations

from distdoctor.facts import fact  # noqa: F401
