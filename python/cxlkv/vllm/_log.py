"""Loggers of cxlkv.vllm that print inside vLLM's processes.

vLLM configures only its own ``vllm`` logger (handler, format, level from
``VLLM_LOGGING_LEVEL``); a logger named ``cxlkv.*`` would have no handler, so
its INFO lines (region attach, cudaHostRegister, first touch: what the TTFT
harness reads from each engine's log) were dropped and only WARNING+ reached
stderr through Python's last-resort handler. ``get(name)`` gives the
``cxlkv`` logger tree vLLM's handlers and level the first time it is called
after ``vllm`` is imported, and leaves it alone when a user configured it
(any handler on ``cxlkv`` already) or set ``VLLM_CONFIGURE_LOGGING=0``.

Thread-safety: ``logging`` is; the one-time set-up runs at import of the
calling module (under the import lock).
"""

from __future__ import annotations

import logging
import os


def get(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` (``name`` under ``cxlkv``), wired to vLLM's handlers."""
    root = logging.getLogger("cxlkv")
    if not root.handlers and os.environ.get("VLLM_CONFIGURE_LOGGING", "1") != "0":
        vllm_root = logging.getLogger("vllm")
        if vllm_root.handlers:
            for h in vllm_root.handlers:
                root.addHandler(h)
            root.setLevel(vllm_root.level or logging.INFO)
            root.propagate = False
    return logging.getLogger(name)
