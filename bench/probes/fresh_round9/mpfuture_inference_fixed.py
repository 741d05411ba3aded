# expect: clean
# source: https://github.com/learning-at-home/hivemind/pull/521
"""Minimal MPFuture-style future whose state lives in a shared-memory byte
buffer, used by a toy expert server that answers requests in inference mode
and resolves the futures from its runtime loop."""
import concurrent.futures._base as base
import os
import threading

import torch

ALL_STATES = base.PENDING, base.RUNNING, base.FINISHED, base.CANCELLED, base.CANCELLED_AND_NOTIFIED


class SharedBytes:
    _lock = threading.Lock()
    _pid = None
    _buffer = None
    _index = 0

    @classmethod
    def next(cls) -> torch.Tensor:
        """Create another shared byte value, represented as a scalar uint8 tensor"""
        with cls._lock:
            if cls._pid != os.getpid() or cls._buffer is None or cls._index >= len(cls._buffer):
                buffer_size = int(os.environ.get("HIVEMIND_SHM_BUFFER_SIZE", 16))
                cls._pid = os.getpid()
                with torch.inference_mode(False):
                    cls._buffer = torch.empty([buffer_size], dtype=torch.uint8).share_memory_()
                cls._index = 0
            cls._index += 1
            return cls._buffer[cls._index - 1]


class MPFuture(base.Future):
    def __init__(self):
        self._shared_state_code = SharedBytes.next()
        self._state_cache = {}
        base.Future.__init__(self)
        self._state, self._result, self._exception = base.PENDING, None, None

    @property
    def _state(self):
        shared_state = ALL_STATES[self._shared_state_code.item()]
        return self._state_cache.get(shared_state, shared_state)

    @_state.setter
    def _state(self, new_state):
        self._shared_state_code[...] = ALL_STATES.index(new_state)


expert = torch.nn.Linear(8, 8)
pending = []


@torch.inference_mode()
def handle_request(inputs):
    future = MPFuture()
    pending.append((future, expert(inputs)))
    return future


futures = [handle_request(torch.randn(2, 8)) for _ in range(3)]

# runtime loop: hand outputs back to the callers
for future, outputs in pending:
    future.set_running_or_notify_cancel()
    future.set_result(outputs)

print([f.result().shape for f in futures])
