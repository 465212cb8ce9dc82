"""A /proc tree for FakeHost: processes with their environment, parent, state and command line."""

from __future__ import annotations

from distdoctor.testing import FakeHost


def stat_line(pid: int, comm: str, state: str = "S", ppid: int = 1, ticks: int = 0, threads: int = 4,
              start: int = 1000) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice num_threads itrealvalue starttime ...
    return (f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194304 10 0 0 0 {ticks} 0 0 0 20 0 {threads} 0 "
            f"{start} 3133440 380 0\n")


def proc_files(procs: dict[int, dict]) -> dict:
    """procs: pid -> {env: {...}, ppid, state, cmdline: [...], ticks, wchan, uid}."""
    files: dict = {}
    for pid, p in procs.items():
        env = p.get("env", {})
        files[f"/proc/{pid}/environ"] = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
        cmd = p.get("cmdline", ["/usr/bin/python3", "train.py"])
        files[f"/proc/{pid}/cmdline"] = b"".join(c.encode() + b"\0" for c in cmd)
        files[f"/proc/{pid}/stat"] = stat_line(pid, cmd[0].rsplit("/", 1)[-1][:15], p.get("state", "S"),
                                               p.get("ppid", 1), p.get("ticks", 0))
        files[f"/proc/{pid}/wchan"] = p.get("wchan", "futex_do_wait")
        uid = p.get("uid", 0)
        files[f"/proc/{pid}/status"] = (f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                        f"SigBlk:\t{p.get('sigblk', '0000000000000000')}\n"
                                        f"SigIgn:\t0000000001001000\nSigCgt:\t{p.get('sigcgt', '0000000000000002')}\n")
    return files


def proc_host(procs: dict[int, dict], commands: dict | None = None, me: int = 4242, me_ppid: int = 1,
              **kwargs) -> FakeHost:
    files = proc_files(procs)
    files[f"/proc/{me}/stat"] = stat_line(me, "distdoctor", "R", me_ppid)
    files["/proc/self/status"] = "Name:\tdistdoctor\nCapEff:\t000001ffffffffff\n"
    files.update(kwargs.pop("files", {}))
    return FakeHost(files=files, dirs={"/proc": [str(p) for p in [*procs, me]] + ["self", "net"]},
                    commands=commands or {}, pid=me, **kwargs)
