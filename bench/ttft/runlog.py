"""The run's raw log: one JSON object per line, appended and flushed as each
record completes (a request, a replica start, a control, a ceiling), so a run
killed at any point loses at most the line being written and a restarted run
knows what is done.

A torn last line (the process died mid-write) is skipped on reading and
reported, never silently taken as data.
"""

import json
import os
import time


class RunLog:
    """Append-only JSON-lines file. Not thread-safe on its own: the load runs
    write from several client threads and hold ``lock`` around ``append``."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.records, self.torn = read(path)
        self._f = open(path, "a", encoding="utf-8")
        import threading

        self.lock = threading.Lock()

    def append(self, rec):
        rec = dict(rec)
        rec.setdefault("wall", round(time.time(), 3))
        line = json.dumps(rec, sort_keys=True)
        with self.lock:
            self._f.write(line + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
            self.records.append(rec)
        return rec

    def done_keys(self, kind="req"):
        """The ``key`` of every record of this kind already in the log."""
        return {r["key"] for r in self.records if r.get("kind") == kind and "key" in r}

    def close(self):
        self._f.close()


def read(path):
    """(records, torn line count) of a log; a missing file is an empty log."""
    out, torn = [], 0
    if not os.path.exists(path):
        return out, torn
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                torn += 1
    return out, torn
