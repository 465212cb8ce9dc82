"""May this process read other processes' memory (what py-spy does, ptrace or
process_vm_readv, both under the kernel's ptrace access check)?

The rules (Documentation/admin-guide/LSM/Yama.rst, ptrace(2)): another user's process needs
CAP_SYS_PTRACE; with Yama, kernel.yama.ptrace_scope 1 allows only one's descendants unless
CAP_SYS_PTRACE, 2 only CAP_SYS_PTRACE, 3 nobody until reboot. Containers drop CAP_SYS_PTRACE
unless started with it. Pure: the caller reads the files."""

from __future__ import annotations

from dataclasses import dataclass

CAP_SYS_PTRACE = 19
SCOPE_FILE = "/proc/sys/kernel/yama/ptrace_scope"


@dataclass(frozen=True)
class Permission:
    allowed: bool
    why: str
    fix: str = ""


def cap_effective(status_text: str) -> int | None:
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split()[1], 16)
            except (IndexError, ValueError):
                return None
    return None


def uid_of(status_text: str) -> int | None:
    for line in status_text.splitlines():
        if line.startswith("Uid:"):
            try:
                return int(line.split()[2])  # the effective uid
            except (IndexError, ValueError):
                return None
    return None


def judge(scope: int | None, cap_eff: int | None, my_uid: int, target_uids: set[int]) -> Permission:
    has_cap = cap_eff is not None and bool(cap_eff >> CAP_SYS_PTRACE & 1)
    others = sorted(u for u in target_uids if u != my_uid)
    cap_fix = ("# in a container: start it with --cap-add SYS_PTRACE (docker/podman), or add SYS_PTRACE to the "
               "pod's securityContext.capabilities")
    if scope == 3:
        return Permission(False, "kernel.yama.ptrace_scope is 3: no process may read another's memory until reboot",
                          "# kernel.yama.ptrace_scope=3 cannot be lowered at run time: set it to 0 or 1 in "
                          "/etc/sysctl.d/ and reboot")
    if others and not has_cap:
        return Permission(False, f"the ranks run as uid {', '.join(map(str, others))} and this process (uid {my_uid}) "
                                 "lacks CAP_SYS_PTRACE",
                          "# run distdoctor hang as the job's user, or as root\n" + cap_fix)
    if scope == 2 and not has_cap:
        return Permission(False, "kernel.yama.ptrace_scope is 2: only a process with CAP_SYS_PTRACE may read another's "
                                 "memory", "sudo distdoctor hang\n" + cap_fix)
    if scope == 1 and not has_cap:
        return Permission(False, "kernel.yama.ptrace_scope is 1: only a rank's own ancestors may read its memory, "
                                 "and this process is not one and lacks CAP_SYS_PTRACE",
                          "sudo sysctl -w kernel.yama.ptrace_scope=0\n" + cap_fix)
    how = f"kernel.yama.ptrace_scope {scope}" if scope is not None else "no Yama"
    return Permission(True, f"{how}, {'with' if has_cap else 'without'} CAP_SYS_PTRACE, ranks of "
                            f"{'this user' if not others else 'other users'}")


# Every fix judge() can give: a snapshot read back from another node is trusted to carry one of
# these and nothing else (a snapshot is JSON anyone on that node could have written).
KNOWN_FIXES = frozenset(judge(scope, 0, 0, others).fix for scope in (None, 1, 2, 3) for others in (set(), {1}))


def check(host, pids: list[int]) -> Permission:
    try:
        scope_text = host.read_text(SCOPE_FILE, max_bytes=64)
    except OSError:
        scope_text = None
    try:
        scope = int(scope_text.strip()) if scope_text else None
    except ValueError:
        scope = None
    try:
        mine = host.read_text("/proc/self/status") or ""
    except OSError:
        mine = ""
    uids = set()
    for pid in pids:
        try:
            uid = uid_of(host.read_text(f"/proc/{pid}/status", max_bytes=16384) or "")
        except OSError:
            uid = None
        if uid is not None:
            uids.add(uid)
    return judge(scope, cap_effective(mine), host.uid(), uids)
