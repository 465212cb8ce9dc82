"""Pure parsers: text in, dataclasses out. No I/O, no logging, one module per tool."""

from __future__ import annotations


class ParseError(ValueError):
    """Output that does not have a shape the parser knows. Names the tool and, where it
    can, the line, so a finding can say exactly what could not be read."""

    def __init__(self, tool: str, message: str, line: int | None = None, text: str = ""):
        self.tool = tool
        self.line = line
        self.text = text
        where = f" (line {line}: {text.strip()[:80]!r})" if line is not None else ""
        super().__init__(f"{tool}: {message}{where}")


def line_matches(text: str, pattern, tool: str, what: str) -> list:
    """The match of pattern on each non-blank line of text (stripped), for outputs of one line
    per record; a line it does not match is a ParseError naming it."""
    matches = []
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.strip():
            m = pattern.match(raw.strip())
            if m is None:
                raise ParseError(tool, f"not {what}", number, raw)
            matches.append(m)
    return matches
