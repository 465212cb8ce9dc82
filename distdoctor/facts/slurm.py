"""Facts for the 'slurm' area."""

from __future__ import annotations

from distdoctor.facts import fact  # noqa: F401
