"""`distdoctor hang`: a running job is stuck; which rank, on which host, doing what.

    discovery.py   the rank processes of the jobs on this node (/proc/<pid>/environ)
    procstate.py   each rank's state from /proc: R/S/D, wchan, threads, CPU over a short window
    stacks.py      each rank's Python stacks through py-spy, non-blocking
    ptrace.py      whether this process may read other processes' memory at all
    flightrec.py   torch Flight Recorder dumps: a restricted unpickler and the JSON form
    frmatch.py     Flight Recorder traces across ranks: the first collective not every rank entered, desyncs
    ras.py         NCCL RAS: version gate (ras.toml), two queries, text and JSON parsed
    rasreport.py   RAS's answers to findings: missing ranks, the group that is behind
    grouping.py    ranks grouped by stack: the wave and the outliers
    collect.py     one node's snapshot (the part that runs on every node)
    gather.py      --job: every node's snapshot through srun --jobid ID --overlap
    verdict.py     snapshots to findings

Everything here reads; nothing stops, signals or slows a rank beyond what py-spy's non-blocking
dump costs (it reads the process's memory while the process runs).
"""
