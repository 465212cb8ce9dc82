"""distdoctor's rendezvous store as a torch.distributed.Store, for init_process_group(store=...)
and for nccl-test's own keys: a Python subclass whose calls go over one authenticated
connection (store_wire.Connection) to rank 0's store_server.

The object must outlive every torch object built on it: torch's trampoline finds the Python
methods through the Python object, and a PrefixStore over a store nobody else references
fails with "Not implemented" once it is collected. Channel keeps it.

torch is imported at the top because the class subclasses dist.Store: this module is imported
only inside nccl-test's session (nccltest/session.py), never by `check` or the other commands,
which must not pay for torch (tests/unit/core/test_no_torch_import.py).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import torch.distributed as dist

from distdoctor.nccltest import store_wire as wire


def _b(value: str | bytes | bytearray | Sequence[int]) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _seconds(timeout: datetime.timedelta | float | None, default: float) -> float:
    if timeout is None:
        return default
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


class BoundedStore(dist.Store):
    """Every key under `prefix`; a wait without its own timeout waits this store's timeout."""

    def __init__(self, conn: wire.Connection, prefix: str, timeout: float):
        super().__init__()
        self.conn = conn
        self.prefix = prefix.encode()
        self.wait_s = max(0.5, timeout)

    def _key(self, key: str | bytes) -> bytes:
        return self.prefix + _b(key)

    def _call(self, op: bytes, keys: Sequence[bytes], number: int = 0, value: bytes = b"",
              wait_s: float = 0.0) -> tuple[int, int, bytes]:
        try:
            status, reply_number, reply = self.conn.call(op, keys, number, value, wait_s)
        except wire.StoreGone as exc:
            raise dist.DistNetworkError(str(exc)) from None
        if status == wire.FULL:
            raise dist.DistStoreError(f"the rendezvous store refused the write: {reply.decode('utf-8', 'replace')}")
        if status == wire.BAD:
            raise dist.DistStoreError(f"the rendezvous store did not understand: {reply.decode('utf-8', 'replace')}")
        return status, reply_number, reply

    def set(self, key, value) -> None:
        self._call(wire.SET, [self._key(key)], value=_b(value))

    def get(self, key) -> bytes:
        status, _n, value = self._call(wire.GET, [self._key(key)], int(self.wait_s * 1000), wait_s=self.wait_s)
        if status != wire.OK:
            raise dist.DistStoreError(f"timed out after {self.wait_s:g} s waiting for {key!r}")
        return value

    def add(self, key, amount: int) -> int:
        return self._call(wire.ADD, [self._key(key)], int(amount))[1]

    def append(self, key, value) -> None:
        self._call(wire.APPEND, [self._key(key)], value=_b(value))

    def check(self, keys) -> bool:
        return bool(self._call(wire.CHECK, [self._key(k) for k in keys])[1])

    def wait(self, keys, timeout=None) -> None:
        seconds = max(0.0, _seconds(timeout, self.wait_s))
        status = self._call(wire.WAIT, [self._key(k) for k in keys], int(seconds * 1000), wait_s=seconds)[0]
        if status != wire.OK:
            raise dist.DistStoreError(f"timed out after {seconds:g} s waiting for {list(keys)!r}")

    def delete_key(self, key) -> bool:
        return bool(self._call(wire.DELETE, [self._key(key)])[1])

    def num_keys(self) -> int:
        return self._call(wire.NUM_KEYS, [])[1]

    def compare_set(self, key, expected, desired) -> bytes:
        expected, desired = _b(expected), _b(desired)
        return self._call(wire.CAS, [self._key(key)], value=len(expected).to_bytes(4, "big") + expected + desired)[2]

    def multi_get(self, keys) -> list[bytes]:
        return [self.get(k) for k in keys]

    def multi_set(self, keys, values) -> None:
        for key, value in zip(keys, values):
            self.set(key, value)

    def close(self) -> None:
        self.conn.close()
