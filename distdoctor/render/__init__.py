"""Renderers: pure functions of a Report. They never run checks or touch the host."""
