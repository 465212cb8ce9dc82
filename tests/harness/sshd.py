"""A real OpenSSH sshd for tests, key-only, after ../shared/lab/sshd.sh (FINDINGS.md section 5).

    lab = SshLab(tmp_path, namespaces)   # namespaces: tests.harness.netns.Namespaces
    net = RUN.subnet("sshd")                             # tests/harness/runprefix.py
    lab.start_netns_host("a", f"{net}.2", f"{net}.1")    # sshd on <net>.2:22 in a namespace
    port = lab.start_loopback()                          # sshd on 127.0.0.1:<a port of the run>
    ...
    lab.stop()

sshd refuses to start without /run/sshd, so each one runs under `unshare --mount` with a
fresh tmpfs on /run: nothing is written outside the test's directory. `StrictModes no`
because pytest's tmp directories live under /tmp (mode 1777). Each sshd runs in the
foreground (-D) as the direct child of the test, so it is stopped by its own pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from tests.harness import apt
from tests.harness.runprefix import RUN
from tests.harness.runprefix import free_port as _run_port

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path


def free_port() -> int:
    return _run_port("127.0.0.1")


def wait_listening(address: str, port: int, seconds: float = 10) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class SshLab:
    def __init__(self, base: str, namespaces=None):
        apt.ensure("openssh-server", "openssh-client")
        self.base = str(base)
        self.ns = namespaces
        self.procs: list[subprocess.Popen] = []
        os.chmod(self.base, 0o700)
        for name, comment in (("host_key", "ddr-host"), ("id_ed25519", "ddr-client"),
                              ("id_unknown", "ddr-stranger"), ("other_host_key", "ddr-other")):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", self.path(name)],
                           check=True, capture_output=True, timeout=30)
        with open(self.path("id_ed25519.pub")) as src, open(self.path("authorized_keys"), "w") as dst:
            dst.write(src.read())
        os.chmod(self.path("authorized_keys"), 0o600)

    def path(self, name: str) -> str:
        return os.path.join(self.base, name)

    def public_key(self, name: str) -> str:
        with open(self.path(name + ".pub")) as fh:
            return " ".join(fh.read().split()[:2])

    def _config(self, name: str, listen: str) -> str:
        conf = self.path(f"sshd_config.{name}")
        with open(conf, "w") as fh:
            fh.write(f"ListenAddress {listen}\nHostKey {self.path('host_key')}\n"
                     f"PidFile {self.path(f'sshd-{name}.pid')}\nAuthorizedKeysFile {self.path('authorized_keys')}\n"
                     "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                     "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPrintMotd no\n"
                     "LogLevel VERBOSE\n")
        return conf

    def _start(self, name: str, listen: str, prefix: list[str]) -> subprocess.Popen:
        conf = self._config(name, listen)
        script = ('mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -m 0755 /run/sshd && '
                  f'{SSHD} -t -f "$1" && exec {SSHD} -D -f "$1" -E "$2"')
        proc = subprocess.Popen([*prefix, "unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                                 "sh", conf, self.path(f"sshd-{name}.log")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def _failed(self, proc: subprocess.Popen, name: str) -> str:
        log = ""
        if os.path.exists(self.path(f"sshd-{name}.log")):
            with open(self.path(f"sshd-{name}.log")) as fh:
                log = fh.read()
        err = proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ""
        return f"sshd {name} did not come up: {err} {log}"

    def start_netns_host(self, short: str, ns_ip: str, root_ip: str, prefix_len: int = 24) -> str:
        """A namespace `short` joined to the root namespace by a veth, with sshd on ns_ip:22."""
        self.ns.add(short)
        tag = RUN.ifname("r", short)
        self.ns.veth(None, tag, short, "eth0")
        self.ns.run(None, ["ip", "addr", "add", f"{root_ip}/{prefix_len}", "dev", tag])
        self.ns.run(short, ["ip", "addr", "add", f"{ns_ip}/{prefix_len}", "dev", "eth0"])
        self.veths = getattr(self, "veths", []) + [tag]
        proc = self._start(short, f"{ns_ip}:22", ["ip", "netns", "exec", self.ns.name(short)])
        if not wait_listening(ns_ip, 22):
            raise RuntimeError(self._failed(proc, short))
        return ns_ip

    def start_loopback(self) -> int:
        port = free_port()
        proc = self._start("lo", f"127.0.0.1:{port}", [])
        if not wait_listening("127.0.0.1", port):
            raise RuntimeError(self._failed(proc, "lo"))
        return port

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            if proc.stderr:
                proc.stderr.close()
        self.procs.clear()
        for tag in getattr(self, "veths", []):
            subprocess.run(["ip", "link", "del", tag], capture_output=True, timeout=10)


class SilentListener:
    """A socket that listens and never accepts: with a backlog of 0 and the queue already
    holding one connection, the kernel drops every later SYN, so connects time out (FINDINGS
    section 7). Needs no root and no namespace."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0):
        self.sock = socket.socket()
        self.sock.bind((address, port))
        self.sock.listen(0)
        self.address, self.port = self.sock.getsockname()[:2]
        self.fillers = []
        # fill the accept queue; later SYNs are dropped
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((self.address, self.port))
            self.fillers.append(filler)
        time.sleep(0.05)

    def close(self) -> None:
        for filler in self.fillers:
            filler.close()
        self.sock.close()
