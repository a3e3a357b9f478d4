"""Test-only loss variants that take their process down, for `sweep --isolate`. Each
but `abort_always_loss` behaves on the contract's tiny smoke-test problem (vocab 16) and
misbehaves on any larger one."""
import os
import time

import torch.nn.functional as F


def _dense(h, weight, targets):
    return F.cross_entropy((h @ weight.T).float(), targets)


def abort_loss(h, weight, targets):
    """Aborts the process (SIGABRT), as a failed assertion in a native kernel does."""
    if weight.shape[0] > 16:
        os.abort()
    return _dense(h, weight, targets)


def sleepy_loss(h, weight, targets):
    """Hangs for ten minutes, as a deadlocked kernel does."""
    if weight.shape[0] > 16:
        time.sleep(600)
    return _dense(h, weight, targets)


def abort_always_loss(h, weight, targets):
    """Aborts on any input, the smoke test's tiny problem too."""
    os.abort()


def rank_1_loss(h, weight, targets):
    """Raises on rank 1 of a process group (a sharded step's) alone, as a failure on one rank does."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() == 1:
        raise ValueError("rank 1 gives up")
    return _dense(h, weight, targets)
