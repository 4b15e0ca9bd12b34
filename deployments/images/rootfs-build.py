#!/usr/bin/env python3
"""Runs a Dockerfile's steps in debootstrap rootfs trees, where no image builder runs.

  deployments/images/rootfs-build.py [--dockerfile F] [--context DIR] [--out DIR]
                                     [--prebuilt STAGE=DIR]

Base images cannot be fetched on this project's machines, but Debian's
packages can: each `FROM debian:bookworm[-slim]` stage starts from a copy of a
`debootstrap --variant=minbase bookworm` tree (cached, tarred, under
$CXLKV_CACHE/rootfs/, built once under a flock; the mirror is the one apt
uses here). The Dockerfile's own instructions then run in it: RUN through
chroot in a private mount namespace (/dev, /proc, resolv.conf), COPY from the
context (the files git tracks or would track) or --from an earlier stage,
ENV, WORKDIR, USER, ENTRYPOINT. What is not supported is refused by name.

Prints one line per step with its seconds and leaves the final stage's tree
in --out (default: a temp dir under the cache), with a JSON summary
(entrypoint, user, per-step seconds) beside it as image.json.
--prebuilt STAGE=DIR takes a named stage's tree as DIR and skips its steps:
the real-node e2e (test/e2e/realnodes/image.sh) gives the build stage a
tree holding /out/ from the host's own build (same Debian release, same
packages), and the runtime stage's steps run as written.
Root only (chroot, mount namespaces). Not thread-safe: one build per --out.
"""
import argparse
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SUPPORTED_BASES = {"debian:bookworm", "debian:bookworm-slim"}
# $CXLKV_CACHE/rootfs, as the Kubernetes and Helm builds cache under $CXLKV_CACHE.
CACHE = os.path.join(os.environ.get("CXLKV_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cxlkv"), "rootfs")


def die(msg):
    sys.exit("rootfs-build: " + msg)


def apt_mirror():
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        if not os.path.exists(path):
            continue
        for line in open(path):
            line = line.strip()
            m = re.match(r"^URIs:\s*(\S+)", line) or re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\b",
                                                            line)
            if m and "security" not in m.group(1):
                return m.group(1)
    die("no Debian mirror found in /etc/apt/sources.list{,.d/debian.sources}")


def base_tarball():
    """debootstrap minbase bookworm, once per machine; returns the tarball's path."""
    os.makedirs(CACHE, exist_ok=True)
    tar = os.path.join(CACHE, "bookworm-minbase.tar")
    with open(os.path.join(CACHE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(tar):
            return tar
        if shutil.which("debootstrap") is None:
            die("debootstrap is not installed (scripts/setup.sh installs it)")
        tree = tempfile.mkdtemp(dir=CACHE, prefix="debootstrap.")
        t0 = time.time()
        print("rootfs-build: debootstrap --variant=minbase bookworm (once per machine)", flush=True)
        log = os.path.join(CACHE, "debootstrap.log")
        with open(log, "w") as f:
            r = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", tree, apt_mirror()],
                               stdout=f, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            shutil.rmtree(tree, ignore_errors=True)
            die("debootstrap failed (log: %s)" % log)
        subprocess.run(["tar", "-C", tree, "-cf", tar + ".tmp", "."], check=True)
        os.rename(tar + ".tmp", tar)
        shutil.rmtree(tree, ignore_errors=True)
        print("rootfs-build: base rootfs in %.0f s" % (time.time() - t0), flush=True)
        return tar


def parse(path):
    """Dockerfile -> list of (instruction, argument string); continuations joined."""
    steps, cur = [], ""
    for raw in open(path):
        line = raw.rstrip("\n")
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if cur and line.lstrip().startswith("#"):
            continue  # a comment inside a continued RUN
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        word, _, rest = cur.strip().partition(" ")
        steps.append((word.upper(), rest.strip()))
        cur = ""
    if cur:
        die("%s ends inside a continued line" % path)
    return steps


class Stage:
    def __init__(self, root, name):
        self.root, self.name = root, name
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": "/root"}
        self.workdir, self.user, self.entrypoint = "/", "0:0", None

    def run(self, cmd, user=None):
        """Runs /bin/sh -c cmd in the tree, in a private mount namespace."""
        r = self.root
        env = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in self.env.items())
        userspec = "--userspec=%s " % (user or self.user) if (user or self.user) != "0:0" else ""
        inner = ("mount --rbind /dev {r}/dev && mount -t proc proc {r}/proc && "
                 "cp /etc/resolv.conf {r}/etc/resolv.conf && "
                 "exec chroot {u}{r} /usr/bin/env -i {env} /bin/sh -c {c}").format(
                     r=shlex.quote(r), u=userspec, env=env,
                     c=shlex.quote("mkdir -p %s && cd %s && %s" % (self.workdir, self.workdir, cmd)))
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c",
                               inner])

    def path(self, p):
        p = p if p.startswith("/") else os.path.join(self.workdir, p)
        return os.path.join(self.root, p.lstrip("/"))


def context_files(context):
    """What an image builder would send: tracked files and untracked unignored ones."""
    out = subprocess.run(["git", "-C", context, "ls-files", "-co", "--exclude-standard", "-z"],
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and os.path.lexists(os.path.join(context, f))]


def copy(stage, args, context, stages):
    opts = [a for a in args if a.startswith("--")]
    srcs, dst = [a for a in args if not a.startswith("--")][:-1], args[-1]
    src_stage = None
    for o in opts:
        if o.startswith("--from="):
            src_stage = stages.get(o.split("=", 1)[1]) or die("COPY %s: no such stage" % o)
        else:
            die("COPY option %s is not supported" % o)
    target = stage.path(dst)
    for s in srcs:
        if src_stage is None and s == ".":
            os.makedirs(target, exist_ok=True)
            files = context_files(context)
            p1 = subprocess.Popen(["tar", "-C", context, "--null", "-T", "-", "-cf", "-"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            p2 = subprocess.Popen(["tar", "-C", target, "-xf", "-"], stdin=p1.stdout)
            p1.stdin.write("\0".join(files).encode())
            p1.stdin.close()
            if p2.wait() != 0 or p1.wait() != 0:
                die("COPY . %s failed" % dst)
            continue
        src = src_stage.path(s) if src_stage else os.path.join(context, s)
        if not os.path.exists(src):
            die("COPY %s: not found" % s)
        if os.path.isdir(src):
            os.makedirs(target, exist_ok=True)
            subprocess.run(["cp", "-a", src.rstrip("/") + "/.", target], check=True)
        else:
            if dst.endswith("/"):
                os.makedirs(target, exist_ok=True)
            subprocess.run(["cp", "-a", src, target], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--dockerfile", default=os.path.join(here, "Dockerfile"))
    ap.add_argument("--context", default=os.path.abspath(os.path.join(here, "..", "..")))
    ap.add_argument("--out", default="")
    ap.add_argument("--prebuilt", action="append", default=[], metavar="STAGE=DIR",
                    help="use DIR as stage STAGE's tree and skip that stage's steps")
    a = ap.parse_args()
    prebuilt = {}
    for p in a.prebuilt:
        name, sep, d = p.partition("=")
        if not sep or not os.path.isdir(d):
            die("--prebuilt %s: want STAGE=DIR with an existing DIR" % p)
        prebuilt[name] = os.path.abspath(d)
    if os.geteuid() != 0:
        die("needs root (chroot, mount namespaces)")
    steps = parse(a.dockerfile)
    tar = base_tarball()
    work = tempfile.mkdtemp(dir=CACHE, prefix="build.")
    stages, order, cur, timings = {}, [], None, []
    skipping = None  # the name of a --prebuilt stage whose steps are skipped
    try:
        for i, (ins, arg) in enumerate(steps):
            t0 = time.time()
            label = "%s %s" % (ins, arg[:70])
            if ins == "FROM" and len(arg.split()) == 3 and arg.split()[2] in prebuilt:
                skipping = arg.split()[2]
                cur = Stage(prebuilt[skipping], skipping)
                stages[skipping] = cur
                stages[str(len(order))] = cur
                order.append(cur)
                print("rootfs-build: step %2d %-80s prebuilt: %s" % (i + 1, label, prebuilt[skipping]),
                      flush=True)
                continue
            if ins != "FROM" and skipping:
                print("rootfs-build: step %2d %-80s skipped (stage %s prebuilt)" % (i + 1, label, skipping),
                      flush=True)
                continue
            skipping = None
            if ins == "FROM":
                parts = arg.split()
                image = parts[0]
                if image not in SUPPORTED_BASES:
                    die("FROM %s: only %s have a debootstrap equivalent" % (image, sorted(SUPPORTED_BASES)))
                name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(order))
                root = os.path.join(work, "stage-" + name)
                os.makedirs(root)
                subprocess.run(["tar", "-C", root, "-xf", tar], check=True)
                cur = Stage(root, name)
                stages[name] = cur
                stages[str(len(order))] = cur
                order.append(cur)
            elif cur is None:
                die("%s before FROM" % ins)
            elif ins == "RUN":
                if arg.startswith("["):
                    arg = " ".join(shlex.quote(x) for x in json.loads(arg))
                if cur.run(arg).returncode != 0:
                    die("step %d failed: %s" % (i + 1, label))
            elif ins == "COPY":
                copy(cur, shlex.split(arg), a.context, stages)
            elif ins == "ENV":
                k, _, v = arg.partition("=")
                cur.env[k.strip()] = v.strip().strip('"')
            elif ins == "WORKDIR":
                cur.workdir = arg
            elif ins == "USER":
                cur.user = arg if ":" in arg else arg + ":" + arg
            elif ins in ("ENTRYPOINT", "CMD"):
                cur.entrypoint = json.loads(arg) if arg.startswith("[") else ["/bin/sh", "-c", arg]
            elif ins in ("LABEL", "EXPOSE", "ARG"):
                pass
            else:
                die("instruction %s is not supported" % ins)
            dt = time.time() - t0
            timings.append({"step": i + 1, "instruction": label, "seconds": round(dt, 1)})
            print("rootfs-build: step %2d %-80s %6.1f s" % (i + 1, label, dt), flush=True)
        final = order[-1]
        out = os.path.abspath(a.out or os.path.join(CACHE, "image"))
        if os.path.exists(out):
            shutil.rmtree(out)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # Never a Python tree copy: it would read /dev/zero and friends as
        # files. rename on one file system, else cp -a (device nodes as nodes).
        try:
            os.rename(final.root, out)
        except OSError:
            subprocess.run(["cp", "-a", final.root, out], check=True)
        json.dump({"entrypoint": final.entrypoint, "user": final.user, "env": final.env,
                   "steps": timings}, open(out + ".json", "w"), indent=1)
        print("rootfs-build: image tree %s (summary %s.json)" % (out, out), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
