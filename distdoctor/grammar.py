"""Counted nouns in messages: "1 check", "2 checks". A message reads as written by a person."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """'1 check', '0 checks', '2 GPUs'; irregular nouns pass their plural ('1 process', '2 processes')."""
    word = noun if count == 1 else (plural_form or noun + "s")
    return f"{count} {word}"
