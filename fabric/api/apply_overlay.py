#!/usr/bin/env python3
"""Apply an OpenAPI Overlay 1.0 document to an OpenAPI file.

Usage: apply_overlay.py BASE.yaml OVERLAY.yaml OUT.yaml

Supports the JSONPath subset the cxlkv overlay uses: `$`, `.name`,
`['name']` / ["name"], and `.*` / `[*]` wildcards. `update` deep-merges
objects (arrays are appended); `remove: true` deletes the target.
"""
import re
import sys

import yaml

TOKEN = re.compile(r"""\.\*|\[\*\]|\.([A-Za-z0-9_$-]+)|\[\s*'([^']*)'\s*\]|\[\s*"([^"]*)"\s*\]""")


def parse_path(expr):
    if not expr.startswith("$"):
        raise ValueError(f"target {expr!r}: must start with $")
    segs, pos = [], 1
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"target {expr!r}: unsupported syntax at {expr[pos:]!r}")
        text = m.group(0)
        segs.append("*" if text in (".*", "[*]") else next(g for g in m.groups() if g is not None))
        pos = m.end()
    return segs


def select(node, segs):
    """Returns (parent, key) pairs for every node the path reaches."""
    found = [(None, None, node)]
    for seg in segs:
        nxt = []
        for _, _, cur in found:
            if isinstance(cur, dict):
                keys = list(cur.keys()) if seg == "*" else ([seg] if seg in cur else [])
                nxt += [(cur, k, cur[k]) for k in keys]
            elif isinstance(cur, list) and seg == "*":
                nxt += [(cur, i, v) for i, v in enumerate(cur)]
        found = nxt
    return found


def merge(target, update):
    if isinstance(target, dict) and isinstance(update, dict):
        for k, v in update.items():
            if k in target:
                target[k] = merge(target[k], v)
            else:
                target[k] = v
        return target
    if isinstance(target, list) and isinstance(update, list):
        return target + update
    return update


def main(base_path, overlay_path, out_path):
    with open(base_path) as f:
        doc = yaml.safe_load(f)
    with open(overlay_path) as f:
        overlay = yaml.safe_load(f)
    if not str(overlay.get("overlay", "")).startswith("1."):
        sys.exit(f"apply overlay {overlay_path}: not an Overlay 1.x document")
    for i, action in enumerate(overlay.get("actions", [])):
        segs = parse_path(action["target"])
        hits = select(doc, segs)
        if not hits:
            sys.exit(f"apply overlay {overlay_path}: action {i} target {action['target']} matches nothing")
        for parent, key, node in hits:
            if action.get("remove"):
                del parent[key]
            elif parent is None:
                doc = merge(doc, action["update"])
            else:
                parent[key] = merge(node, action["update"])
    with open(out_path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
