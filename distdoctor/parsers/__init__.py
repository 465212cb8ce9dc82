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
