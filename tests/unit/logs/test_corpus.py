"""The labelled corpus of real failure logs (tests/data/logs/corpus): every one of them but the
clean runs (expect = ["clean"]) is a failed job, so none may read as clean, no clean run may read
as failed, and the share read right (the labelled cause, and rank where
labelled, leading the diagnosis) must not fall below the figure in score.toml.
`python3 bench/log_corpus.py` prints every miss."""

import os
import re

import pytest

from tests.harness import corpus

LABELS = corpus.labels()


def test_every_file_is_labelled_and_every_label_complete():
    files = {f for f in os.listdir(corpus.CORPUS) if f.endswith(".log")}
    labelled = [e["file"] for e in LABELS]
    assert len(labelled) == len(set(labelled)), "a file labelled twice"
    assert files == set(labelled)
    for e in LABELS:
        assert re.match(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull|discussions)/\d+$", e["source"]), e
        assert e["cause"].strip() and e["fix"].strip() and e["expect"], e


@pytest.mark.parametrize("entry", LABELS, ids=lambda e: e["file"])
def test_no_failed_job_reads_clean(entry):
    verdict = corpus.judge(entry)
    assert not verdict.green, verdict.summary


@pytest.mark.parametrize("entry", [e for e in LABELS if e["expect"] == ["clean"]], ids=lambda e: e["file"])
def test_clean_runs_never_read_as_failed(entry):
    verdict = corpus.judge(entry)
    assert verdict.right, f"{verdict.got}: {verdict.summary}"


def test_score_does_not_fall():
    accuracy, verdicts = corpus.score()
    misses = [f"{v.file}: led with {v.got!r} (rank {v.rank}), want {v.want} (rank {v.want_rank})"
              for v in verdicts if not v.right]
    assert accuracy >= corpus.floor(), f"accuracy {accuracy:.3f} < {corpus.floor()}:\n" + "\n".join(misses)


def test_index_is_generated_from_the_labels():
    import subprocess
    import sys

    made = subprocess.run([sys.executable, os.path.join(corpus.CORPUS, "make_index.py")], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    with open(os.path.join(corpus.CORPUS, "INDEX.md"), encoding="utf-8") as fh:
        assert fh.read() == made, "run: python3 tests/data/logs/corpus/make_index.py > tests/data/logs/corpus/INDEX.md"


# The classes behind the misses of the second first-sight round (docs/log.md), each with every
# real member of the corpus that depends on it: all must read right, not only the one that
# showed the gap.
CLASSES = {
    # a generic "unhandled system error" yields to the failed call NCCL's WARN names (shm, IB)
    "system-error-explained": ["transformers-11658-shm-segment-pod.log", "horovod-98-ibv-create-qp-old-format.log",
                               "deepspeed-2931-ib-completion-error12-peer.log", "nccl-290-shm-fallocate-horovod.log",
                               "pai-megatron-612-unhandled-system-error-ib.log"],
    # launcher prefixes that carry the rank or host: `[N] ` before NCCL's prefix, UCX's epoch clock
    "rank-and-host-prefixes": ["nccl-302-modify-qp-invalid-argument-label.log", "ucx-1880-dc-verbs-retry-timestamped.log",
                               "ucx-2973-fatal-retry-backtrace.log", "ucx-9590-retry-backtrace.log"],
    # crash and exit reports that are not a catalogue cause: never clean, the named process leads
    "exit-reports": ["horovod-1950-mpi-peer-disconnected.log", "determined-3275-horovod-process-exit-code1.log",
                     "horovod-469-mpirun-rank7-sigkill.log", "paddle-13288-mpirun-rank140-sigkill.log",
                     "horovod-410-mpirun-nonzero-exit.log"],
    # wordings of one failure the catalogue knew in another form (UCX < 1.4, NCCL 2.7's retries)
    # third round (docs/log.md): MPICH/Hydra's report of a killed process, JAX's coordination
    # service giving up, torch.multiprocessing.spawn's exit report (its process index is the rank)
    "hydra-reports": ["mplbm-92-hydra-bad-termination-exit9.log", "jukebox-155-mpiexec-killed-signal9.log"],
    "jax-coordination": ["llama-2-jax-20-barrier-deadline-exceeded.log", "gpu-recipes-2-jax-register-barrier-timeout.log",
                         "paxml-77-coordination-deadline-quoted.log"],
    "spawn-exits": ["prompt4nr-3-spawn-process-sigkill.log", "vits-ft-284-spawn-exit-code-1-after-epochs.log",
                    "acumen-4-spawn-sigkill-annotated-traceback.log", "vits-finetuning-32-spawn-windows-exit-code.log"],
    # NCCL's NVLS (NVLink SHARP) setup failing, and aws-ofi-nccl finding no EFA provider
    "nvls-and-ofi": ["nccl-1788-nvls-cuda-failure-401.log", "nccl-1672-nvls-invalid-argument-timestamped.log",
                     "pie-500-nvls-invalid-argument-no-prefix.log", "nccl-1029-cuda-init-error-pdsh-prefix.log",
                     "aws-ofi-nccl-1020-fi-getinfo-no-data.log"],
    # a WARN cut off mid-line at the end of a paste is the whole line another rank printed, and a
    # cut-off WARN whose whole text is nowhere else stays an error
    "cut-off-lines": ["clean-horovod-969-tag-output-ibverbs-warn.log", "oneflow-3586-veth-connect-timeout.log"],
    # the third round's second batch: a lead line naming no speaker in one rank's own log (a
    # line the paste wrapped), glog's FATAL check report, vLLM's pynccl wording of NCCL errors
    "one-rank-inputs": ["atmorep-55-launch-failure-label-wrapped.log"],
    "glog-fatal": ["uccl-301-glog-check-failed-roce-gid.log"],
    "pynccl-wording": ["nccl-1591-vllm-ray-internal-error-ib.log", "ray-44533-vllm-nccl-internal-busid.log"],
    # the third batch: several torchrun agents' reports (the earliest time leads), a failed
    # assertion (glibc's, UCX's, CUDA's device-side) as a crash
    "torchrun-reports": ["accelerate-1519-two-root-causes-earliest.log", "accelerate-2960-root-cause-rank10-srun-task0.log"],
    "assertions": ["ucx-4008-timestamp-glued-tag-assertion.log", "ms-swift-3267-device-side-assert-rank0.log"],
    # the fourth batch: heartbeat and watchdog reports in pasted shapes, one wrapped at a fixed width
    "heartbeat-pastes": ["vlm-r1-257-heartbeat-stuck-wrapped.log", "llamafactory-6953-heartbeat-rank144-staggered-start.log",
                         "xdit-147-heartbeat-pg-rank-vs-global.log", "sglang-1691-heartbeat-first-pg-no-heartbeat.log",
                         "open-r1-620-watchdog-what-wrapped.log"],
    # the fifth batch: Slurm's own failures (a step that could not exec its program, slurmd
    # failing under systemd, shown by the journal rather than systemctl status)
    "slurm-and-services": ["arjunausers-46-slurm-script-execve-missing.log", "bibigrid-705-slurmd-gres-fatal-journal.log"],
    "older-wordings": ["ucx-1880-dc-verbs-retry-timestamped.log", "oneflow-3586-veth-connect-timeout.log",
                       "ucx-5199-transport-retry-ib.log", "ucx-6000-transport-retry-roce.log"],
    # the fourth round (docs/log.md): an MPI library's own error lines (a source location before
    # "Error:"/"Fatal:", Open MPI's "No components were able to be opened", its signal handler's
    # report), PMIx's errors (Open MPI, PRRTE, Slurm's plugin), the DeepSpeed launcher killing its
    # workers, NCCL's numbered "Cuda failure N '...'", aws-ofi-nccl/libfabric errors, the
    # rendezvous store gone under an agent, and torch naming the rank whose group it destroys
    "mpi-library-errors": ["ompi-7768-ucp-thread-multiple-no-pml.log", "ucx-1578-fatal-no-uct-ep-timestamp-tag.log",
                           "prrte-1635-psm2-driver-error-abort.log", "deepops-942-ucx-wireup-abort-in-mpi-init.log",
                           "easybuild-755-ucx-ibv-query-gid-ucp-worker.log", "ucx-10522-address-list-oom-mpi-init.log"],
    "pmix-errors": ["radical-pilot-2177-prun-pmix-unreachable.log", "charm-2683-pmix-init-failed-ucx-cmiabort.log",
                    "deepops-1179-slurm-pmix-collective-timeout-pyxis.log",
                    "clean-openpmix-1716-gds-lock-error-at-finalize.log"],
    "deepspeed-kills": ["chatglm-finetuning-102-deepspeed-killing-glued-tqdm.log", "deepspeed-3232-return-code-minus9.log"],
    "numbered-cuda-failures": ["nccl-1283-ray-timestamped-alloc-cuda-failure.log", "open-sora-plan-386-nccl-enqueue-cuda-oom.log",
                               "skyrl-84-ray-unhandled-cuda-invalid-argument.log", "nccl-1235-peer-closed-then-cuda-oom.log",
                               "nccl-1788-nvls-cuda-failure-401.log"],
    "ofi-libfabric": ["aws-ofi-nccl-24-ofi-open-av-failed.log", "aws-ofi-nccl-346-efa-invalid-address.log",
                      "aws-ofi-nccl-889-ofi-endpoint-invalid-argument.log", "aws-ofi-nccl-1020-fi-getinfo-no-data.log"],
    "rendezvous-store-gone": ["wespeaker-171-rendezvous-shutdown-broken-pipe.log",
                              "colossalai-4009-rendezvous-connection-colossalai-run.log"],
    "group-destroyed-rank": ["metaseq-90-unhandled-cuda-error-commabort-what.log"],
    # its second batch: srun's own report that it aborted the step
    "srun-step-aborted": ["pyscenic-456-srun-step-aborted-timed-out.log", "snakemake-225-srun-layout-tasks.log"],
    # its third batch: googletest's report of a test body that threw a C++ exception
    "cpp-exceptions": ["mscclpp-431-modify-qp-no-device-gtest.log"],
    # the fifth round (docs/log.md): NVSHMEM's own error report (DeepEP under sglang, Megatron),
    # MPI_Init failing in MPICH, Intel MPI and MVAPICH (the rank the report states; a stack head
    # alone on its line), Hydra's error stack, bash's report of a killed child, JAX's gRPC refusal
    # and XLA's stuck rendezvous, Slurm's preemption and time limit with the job id, NCCL's
    # return-code trail with no WARN, torchrun's report pasted from its middle, a watchdog line
    # cut inside its phrase, and errors a run survived (Python's ignored reports, a benchmark
    # that printed its results after a probe error)
    "nvshmem": ["sglang-7888-nvshmem-ibrc-modify-qp.log", "deepep-223-nvshmem-bootstrap-broken-pipe.log",
                "deepep-55-nvshmem-no-transport.log", "deepep-150-nvshmem-bootstrap-connect-timeout.log",
                "megatron-bridge-5050-nvshmem-ibgda-create-ah.log", "nvshmem-33-ibgda-create-ah-connect-eps.log",
                "sglang-12533-nvshmem-ibgda-devx-uar-unprivileged.log", "deepep-139-nvshmem-ibgda-init-failed-roce.log"],
    "mpi-init-reports": ["soca-682-intel-mpi-ofi-addrinfo-srun.log", "mpi4py-281-intel-mpi-other-error-segfault.log",
                         "nest-376-mvapich-pmpi-init-thread.log", "radical-pilot-766-cray-pmi-bind-in-use.log",
                         "mpich-6446-pmi2-init-returned-tap.log"],
    "hydra-errors": ["radical-pilot-301-hydra-pbs-tm-init.log", "mpich-668-hydra-execvp-no-such-file.log"],
    "shell-signal": ["opennmt-1824-shell-killed-no-traceback.log", "gmtracker-11-bare-killed-start-training.log",
                     "simsg-3-killed-glued-to-tqdm.log", "vectornet-37-killed-after-processing-bar.log"],
    # its second batch: torchrun's agent stopped by a signal, TensorFlow's collective abort, SkyPilot
    "elastic-signals": ["rrhf-35-sighup-death-signal.log", "vrt-47-sighup-launch-traceback.log",
                        "lerobot-3818-ctrl-c-stuck-atexit-ignored.log", "pytorch-150916-elastic-agent-killed-rdzv-closed.log"],
    "tf-and-skypilot": ["mlcommons-272-tf-ringreduce-socket-closed.log", "skypilot-5031-managed-job-failed-controller.log"],
    "jax-and-xla": ["jax-22740-xla-clique-rendezvous-stuck.log", "marin-7650-jax-coordinator-connection-refused.log",
                    "llama-2-jax-20-barrier-deadline-exceeded.log"],
    "slurm-cancellations": ["gemmaker-242-job-cancelled-preemption.log", "lightning-20542-step-time-limit-sigterm-bypass.log"],
    "nccl-silent-return": ["nccl-1099-socket-poll-connect-no-warn.log"],
    "torchrun-record-pasted": ["megatron-1880-torchrun-sigsegv-rank0.log", "mmseg-3106-childfailed-sigabrt-root-rank0.log",
                               "colossalai-3582-root-cause-rank1-gpu21.log", "colossalai-2992-no-other-failures-rank0.log"],
    "watchdog-cut": ["llamafactory-8261-watchdog-tqdm-numbered-rank5.log", "llamafactory-7396-watchdog-numbered.log"],
    "survived-errors": ["clean-ucx-8746-create-cq-warning-osu-ran.log", "clean-mpich-902-mpd-close-failed-after-result.log",
                        "clean-nccl-1706-two-gpu-run-ok.log", "clean-ompi-1438-pmix-broken-pipe-after-passed.log",
                        "ucx-8229-ibv-create-cq-no-memory.log", "clean-pytorch-95724-exception-ignored-finalize-each-epoch.log"],
    # the sixth round: a rank that died on a signal (reported after its peers' resets) is the peer
    # that went away; Paddle's launcher naming the failed worker
    "crashed-peer": ["horovod-2835-elastic-autotune-segfault.log"],
    "paddle-launcher": ["paddledetection-7380-launch-container-rank0-failed.log"],
}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_member_of_a_fixed_class_reads_right(name):
    by_file = {e["file"]: e for e in LABELS}
    wrong = [f"{v.file}: {v.got!r} rank {v.rank}" for v in (corpus.judge(by_file[f]) for f in CLASSES[name])
             if not v.right]
    assert not wrong, wrong
