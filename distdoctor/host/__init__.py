"""The one seam between distdoctor and the machine.

Only this package runs commands, opens sockets, reads the environment, /proc and /sys (a ruff
rule bans subprocess, socket and os.environ elsewhere). Every call is bounded by a timeout, and
the ordinary ways a sick machine misbehaves (a missing tool, a hung command, an unreadable file)
come back as values, not exceptions, so that facts and checks can turn them into findings.
`HostAPI` (protocol.py) is what facts and checks may call; `Host` is the real machine, one
module per resource; `distdoctor.testing.FakeHost` answers the same protocol from captured data.
"""

from __future__ import annotations

import os
import threading
from typing import Mapping

from distdoctor import bounded
from distdoctor.host.files import Files
from distdoctor.host.network import Network
from distdoctor.host.nvml import Nvml
from distdoctor.host.processes import LineFilter, Processes
from distdoctor.host.protocol import HostAPI
from distdoctor.host.pyenv import PythonEnv, metadata_folders
from distdoctor.host.results import MAX_OUTPUT, CommandResult, ConnectResult, Distribution, ResolveResult

__all__ = ["Host", "HostAPI", "CommandResult", "ConnectResult", "Distribution", "ResolveResult", "LineFilter",
           "MAX_OUTPUT", "metadata_folders"]


class Host(Processes, Files, Network, PythonEnv, Nvml):
    """The real machine."""

    def __init__(self, env: Mapping[str, str] | None = None, cache=None):
        self.env: Mapping[str, str] = dict(os.environ if env is None else env)
        self.cache = cache  # a toolcache.ToolCache for run_cached, or None
        self._started: dict[str, bounded.Pending[CommandResult]] = {}  # start_cached's runs, by cache key
        self._started_lock = threading.Lock()
