#!/usr/bin/env python3
"""Every room's door: no C/C++/CUDA file includes another room's private header.

A room is a directory with one door (docs/architecture.md, "Rooms and
doors"). Its private headers are the headers under it that are not in its
door; a file outside the room may include a door header, never a private one,
unless the room names it as an allowed outsider (the engine's fuzzer, the DRA
binaries' thin mains).

An include is resolved as the compiler would find it: first beside the
including file (a quoted name), then any header of the tree whose path ends
with the included name. It is a violation when no candidate is beside the
file, in the file's own room, or in a door, and some candidate is another
room's private header.

  door_check.py ROOT FILE...   prints "FILE:LINE: <include line>" per
                               violation in FILE... (paths relative to ROOT;
                               the headers among them are the tree's); exit 0
The tree stage (scripts/test.d/06-tree.sh) runs it on a planted tree first,
so a check that matches nothing fails too.
"""
import os
import re
import sys

# (room, door, allowed outsiders). `door`: paths relative to the room that
# outsiders may include (a trailing "/" names a directory). The most specific
# room wins (dra/controller before dra).
ROOMS = [
    # The engine: include/cxlkv/ is its public door (outside the room); the
    # internal doors are cxlkv_internal's and cxlkv_testutil's
    # (src/region/CMakeLists.txt).
    ("src/region", ["region_internal.h", "crc32c.h", "visibility/visibility.h", "testutil.h"],
     ["fuzz/"]),
    # The GPU data path (src/transfer/CMakeLists.txt's door directory).
    ("src/transfer", ["region_gpu.h", "gpu_transfer.h", "kv_layout.h", "cuda_status.h"], []),
    ("base", ["include/"], []),
    ("kube", ["include/"], []),
    ("fabric", ["include/"], []),
    ("fabricd", ["include/"], []),
    ("hostd", ["include/"], []),
    # The DRA driver: each part's headers are for its own part and its thin
    # main; the claim-status contract is for everyone (the CLI's `status`).
    ("dra/common", ["claim_status.h"], ["dra/", "cmd/cxlkv-dra-"]),
    ("dra/controller", ["controller.h"], ["cmd/cxlkv-dra-controller/"]),
    ("dra/kubeletplugin", [], ["cmd/cxlkv-dra-kubeletplugin/"]),
    ("tools/cli", [], []),
    ("tools/bench_gpu", [], []),
    ("python", [], []),
]

# One private header one outsider may reach, and why.
EXCEPTIONS = [
    # The engine's CPU CRC combines chunk CRCs with the same math as the GPU
    # CRC (one header-only copy).
    ("src/transfer/crc32c_math.h", "src/region/"),
]

HEADER = re.compile(r"\.(h|hpp|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')


def room_of(path):
    best = None
    for room, door, allowed in ROOMS:
        if path == room or path.startswith(room + "/"):
            if best is None or len(room) > len(best[0]):
                best = (room, door, allowed)
    return best


def in_door(path, room, door):
    rel = path[len(room) + 1:]
    return any(rel.startswith(d) if d.endswith("/") else rel == d for d in door)


def main():
    root, files = sys.argv[1], sys.argv[2:]
    # The tree's headers are the headers among the files named (the stage
    # names every tracked source file).
    headers = [f for f in files if HEADER.search(f)]
    for f in files:
        mine = room_of(f)
        try:
            lines = open(os.path.join(root, f), encoding="utf-8", errors="replace").readlines()
        except OSError:
            continue
        for no, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = m.group(1)
            beside = os.path.normpath(os.path.join(os.path.dirname(f), name))
            if os.path.isfile(os.path.join(root, beside)):
                candidates = [beside]
            else:
                candidates = [h for h in headers if h == name or h.endswith("/" + name)]
            bad = False
            for h in candidates:
                owner = room_of(h)
                if owner is None or (mine is not None and owner[0] == mine[0]) or \
                        in_door(h, owner[0], owner[1]) or \
                        any(f.startswith(a) for a in owner[2]) or \
                        any(h == p and f.startswith(a) for p, a in EXCEPTIONS):
                    bad = False
                    break
                bad = True
            if bad:
                print(f"{f}:{no}: {line.rstrip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
