"""DCGM's own view of the GPUs, where DCGM is installed: `dcgmi health -c` (its passive health
watches) read under a bound and judged by distdoctor/hardware/dcgm.py, the same judge a pasted
`dcgmi diag` or `dcgmi health -c` gets in `distdoctor log` (see docs/hardware.md)."""

from __future__ import annotations

from distdoctor.api import Context, check, skip, warn
from distdoctor.facts.hardware import DCGMI_TIMEOUT
from distdoctor.hardware.dcgm import judge_health


@check("gpu.dcgm-health", title="DCGM's health watches report no GPU failure",
       tags=("gpu", "health", "hardware", "dcgm"), timeout=DCGMI_TIMEOUT + 5)
def dcgm_health(ctx: Context):
    """`dcgmi health -c` where dcgmi is installed: each incident DCGM's watches retained (PCIe
    replays, memory, InfoROM, thermal, power, NVLink, driver, NVSwitch) as one finding, a Failure
    with the action of distdoctor/hardware/dcgm.toml, a Warning never draining; NVLink links DCGM calls
    down are gpu.nvlink's to judge (a WARN here: DCGM says it of GPUs with no NVLink). No dcgmi: SKIP.
    A `dcgmi` that does not answer within the bound is a finding (a stalled host engine often means
    a stalled GPU driver)."""
    state = ctx.facts.dcgm_health
    if state.state == "absent":
        yield skip("dcgmi is not installed: DCGM's health watches not read")
        return
    if state.state == "hung":
        yield warn(f"`dcgmi health -c` did not answer within {DCGMI_TIMEOUT:g} s", subject="dcgmi", action="none",
                   evidence={"detail": state.detail},
                   explanation="The DCGM host engine is stuck. A GPU whose driver stalls stalls DCGM with it "
                               "(NVIDIA/NVSentinel#1748): look at gpu.xid and gpu.inventory on this node.",
                   fix="systemctl status nvidia-dcgm --no-pager")
        return
    if state.state == "error" or state.health is None:
        yield skip(f"`dcgmi health -c` gave no report: {state.detail}",
                   explanation="dcgmi talks to the nv-hostengine service; without it there is nothing to read.",
                   fix="systemctl enable --now nvidia-dcgm")
        return
    if not state.health.watches_enabled:
        yield skip("DCGM's health watches are not enabled on this node",
                   fix="dcgmi health -s a   # then wait about 60 s before the first check")
        return
    yield from judge_health(state.health)


CHECKS = [dcgm_health]
