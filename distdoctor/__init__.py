"""distdoctor: find why a distributed deep-learning job hangs or fails, and print the fix."""

__version__ = "0.1.0"
