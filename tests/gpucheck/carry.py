"""What travels to a GPU machine for scripts/gpu-check: the Debian packages
it lacks to build vramtrace (downloaded here by `gpu-check --prepare-carry`),
unpacked there into a prefix, and the libraries found or linked for the run."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from typing import Dict, List, Optional

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class StepFailed(Exception):
    """A check of a gpu-check step failed: the message goes into the results
    (raised here too, where the carry cannot be unpacked)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise StepFailed(msg)
CARRY = os.path.join(SRC, ".gpu-carry")
# What the GPU machine lacks to build vramtrace (KINDS.md): the development
# files of libunwind, zstd and libdw (with libelf, and zlib and liblzma that
# libdw.pc requires), the libraries they link to, and pkg-config itself.
CARRY_PACKAGES = ["libunwind-dev", "libunwind8", "libzstd-dev", "libzstd1", "libdw-dev",
                  "libdw1", "libelf-dev", "libelf1", "zlib1g-dev", "liblzma-dev",
                  "libbz2-1.0", "pkgconf-bin", "libpkgconf3"]
MULTIARCH = "x86_64-linux-gnu"
# The carried libraries' sonames: what vramtrace's build and the carried
# pkgconf load at run time.
CARRY_SONAMES = ["libunwind.so.8", "libzstd.so.1", "libdw.so.1", "libelf.so.1", "libbz2.so.1.0",
                 "liblzma.so.5", "libz.so.1", "libpkgconf.so.3"]


# ---- the carried Debian packages ---------------------------------------------

def unpack_deb(deb: str, dest: str) -> None:
    """Extracts a .deb's files under `dest` (what `dpkg -x` does), in Python:
    the GPU machine need not have dpkg or ar. A .deb is an ar archive whose
    member data.tar.{xz,gz,zst} holds the files."""
    with open(deb, "rb") as f:
        data = f.read()
    check(data[:8] == b"!<arch>\n", f"{deb}: not a Debian package")
    pos = 8
    while pos + 60 <= len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if not name.startswith("data.tar"):
            continue
        if name.endswith(".zst"):   # Python's tarfile cannot read zstd: dpkg can
            subprocess.run(["dpkg-deb", "-x", deb, dest], check=True)
            return
        # Python >= 3.12 warns without an extraction filter; "tar" refuses
        # absolute and upward paths (skipped here already) and keeps links
        safe = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
            for m in tar.getmembers():
                if m.isdev() or os.path.isabs(m.name) or ".." in m.name.split("/"):
                    continue
                tar.extract(m, dest, **safe)
        return
    raise StepFailed(f"{deb}: no data.tar member")


def unpack_carry(debs: List[str], prefix: str) -> List[str]:
    """Unpacks `debs` into `prefix` and points their pkg-config files at it;
    returns the pkg-config folders."""
    if os.path.isdir(prefix):
        shutil.rmtree(prefix)
    os.makedirs(prefix)
    for deb in debs:
        unpack_deb(deb, prefix)
    pcdirs = [d for d in (os.path.join(prefix, "usr", "lib", MULTIARCH, "pkgconfig"),
                          os.path.join(prefix, "usr", "share", "pkgconfig")) if os.path.isdir(d)]
    for d in pcdirs:
        for pc in os.listdir(d):
            path = os.path.join(d, pc)
            with open(path) as f:
                text = f.read()
            # Debian's .pc files name /usr (as prefix, or in libdir and
            # includedir outright) and some a libdir of ${prefix}/lib
            # where the library is in the multiarch folder: all into the prefix
            text = re.sub(r"^(\w+)=/usr(/|\s*$)",
                          lambda m: f"{m.group(1)}={prefix}/usr{m.group(2)}", text, flags=re.M)
            text = re.sub(r"^libdir=(\$\{(?:exec_)?prefix\})/lib\s*$",
                          lambda m: f"libdir={m.group(1)}/lib/{MULTIARCH}", text, flags=re.M)
            with open(path, "w") as f:
                f.write(text)
    return pcdirs


def system_has(soname: str) -> bool:
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True).stdout
            return any(line.strip().startswith(soname + " ") for line in out.splitlines())
        except OSError:
            continue
    return False


def carried_runtime_libs(prefix: str) -> Dict[str, str]:
    """{soname: path} of the carried shared libraries the system lacks: only
    these are put on LD_LIBRARY_PATH (a system copy, maybe newer, wins)."""
    found: Dict[str, str] = {}
    for soname in CARRY_SONAMES:
        for d in (os.path.join(prefix, "usr", "lib", MULTIARCH),
                  os.path.join(prefix, "lib", MULTIARCH)):
            path = os.path.join(d, soname)
            if os.path.exists(path) and not system_has(soname):
                found[soname] = path
                break
    return found


def link_dir(path: str, libs: Dict[str, str]) -> None:
    """A folder of symbolic links, one per library, named by soname."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    for soname, target in libs.items():
        os.symlink(os.path.realpath(target), os.path.join(path, soname))


def find_system_lib(soname: str) -> Optional[str]:
    """Where the dynamic loader finds `soname` (ldconfig's cache, else the
    folders of LD_LIBRARY_PATH and the usual ones, the driver's included)."""
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True).stdout
        except OSError:
            continue
        for line in out.splitlines():
            parts = line.strip().split(" => ")
            if parts[0].startswith(soname + " ") and "x86-64" in parts[0]:
                return parts[1]
        break
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) + [
            "/usr/lib/" + MULTIARCH, "/usr/local/nvidia/lib64", "/usr/lib64", "/usr/lib"]:
        if d and os.path.exists(os.path.join(d, soname)):
            return os.path.join(d, soname)
    return None


def make_test_deb(path: str) -> str:
    """A tiny .deb like Debian's (ar; data.tar.xz with a .pc and a link)."""
    def ar_member(name: str, body: bytes) -> bytes:
        head = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
        return head + body + (b"\n" if len(body) & 1 else b"")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        pc = (b"prefix=/usr\nlibdir=${prefix}/lib/" + MULTIARCH.encode() +
              b"\nincludedir=${prefix}/include\nName: vtcheck\nDescription: t\nVersion: 1\n"
              b"Libs: -L${libdir} -lvtcheck\nCflags: -I${includedir}\n")
        info = tarfile.TarInfo(f"./usr/lib/{MULTIARCH}/pkgconfig/vtcheck.pc")
        info.size = len(pc)
        tar.addfile(info, io.BytesIO(pc))
        link = tarfile.TarInfo(f"./usr/lib/{MULTIARCH}/libvtcheck.so")
        link.type, link.linkname = tarfile.SYMTYPE, "libvtcheck.so.1"
        tar.addfile(link)
    with open(path, "wb") as f:
        f.write(b"!<arch>\n" + ar_member("debian-binary", b"2.0\n") +
                ar_member("data.tar.xz", buf.getvalue()))
    return path


def write_pkgconf_wrapper(prefix: str) -> str:
    """pkg-config for meson: the carried pkgconf with its own library."""
    path = os.path.join(prefix, "pkg-config")
    libdir = os.path.join(prefix, "usr", "lib", MULTIARCH)
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nLD_LIBRARY_PATH="{libdir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
                f'exec "{prefix}/usr/bin/pkgconf" "$@"\n')
    os.chmod(path, 0o755)
    return path


# ---- carry preparation -----------------------------------------------------------

def prepare_carry() -> int:
    """apt-get download the packages into .gpu-carry/debs/ (a folder git
    ignores) and print what travels."""
    debs = os.path.join(CARRY, "debs")
    os.makedirs(debs, exist_ok=True)
    for f in os.listdir(debs):
        os.unlink(os.path.join(debs, f))
    rc = subprocess.run(["apt-get", "download"] + CARRY_PACKAGES, cwd=debs).returncode
    if rc:
        print("gpu-check: apt-get download failed", file=sys.stderr)
        return 1
    ignored = subprocess.run(["git", "-C", SRC, "check-ignore", "-q", ".gpu-carry/"]).returncode
    ignored = ignored == 0
    total = 0
    for f in sorted(os.listdir(debs)):
        size = os.path.getsize(os.path.join(debs, f))
        total += size
        print(f"{size / 2**20:7.2f} MiB  {f}")
    print(f"{total / 2**20:7.2f} MiB  in all, in .gpu-carry/debs/" +
          ("" if ignored else "  (NOT ignored by git: add /.gpu-carry/ to .gitignore)"))
    return 0
