"""The old home of the torch worker, kept for the lesson tests and notebooks that import it from here.

The torch worker lives in ``cudacourse/workers/`` now (client ``torch.py``, program ``torch_serve.py``, wire
format ``wire.py``); the course's own code imports it from there.
"""

from __future__ import annotations

from cudacourse.workers.torch import (
    RemoteFunction,
    RemoteModule,
    TorchWorker,
    WorkerObject,
    backward,
    hosted,
    run_beside,
    triton_cache_env,
)

__all__ = ["RemoteFunction", "RemoteModule", "TorchWorker", "WorkerObject", "backward", "hosted", "run_beside",
           "triton_cache_env"]
