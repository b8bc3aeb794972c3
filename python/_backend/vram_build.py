"""The build backend (PEP 517, PEP 660) of the vram Python package.

It packs the vram/ folder as it is, with the libvram.so built beside it when
there is one, and needs nothing but the standard library: `pip install
./python` then works offline, where setuptools would need the separate
`wheel` package (setuptools before 70.1) that an offline machine may lack.

The metadata comes from pyproject.toml's [project] table, of which it reads
name, version, description and requires-python (keep them one line each).
"""

import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "vram"
LIBRARY = "libvram.so"
SKIP_DIRS = {"__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo")


def _project():
    fields, section = {}, None
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[project]":
                m = re.match(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', line)
                if m:
                    fields[m.group(1)] = m.group(2)
    for key in ("name", "version"):
        if key not in fields:
            raise RuntimeError("pyproject.toml: [project] has no %s" % key)
    return fields


def _files():
    """(path on disk, path in the archive) of the package, sorted."""
    out = []
    top = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(SKIP_SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            out.append((path, os.path.relpath(path, ROOT).replace(os.sep, "/")))
    return out


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    return "\n".join(lines) + "\n"


def _tag(has_library):
    if not has_library:
        return "py3-none-any"
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


class _Wheel:
    def __init__(self, directory, p, tag):
        self.dist = "%s-%s" % (p["name"].replace("-", "_"), p["version"])
        self.name = "%s-%s.whl" % (self.dist, tag)
        self.path = os.path.join(directory, self.name)
        self.zip = zipfile.ZipFile(self.path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def write(self, arcname, data):
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)

    def add(self, arcname, data):
        """Writes data and records its hash in RECORD."""
        self.write(arcname, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self, p, tag, purelib):
        info = self.dist + ".dist-info/"
        self.add(info + "METADATA", _metadata(p).encode())
        self.add(info + "WHEEL", ("Wheel-Version: 1.0\nGenerator: vram_build\nRoot-Is-Purelib: %s\n"
                                  "Tag: %s\n" % ("true" if purelib else "false", tag)).encode())
        self.add(info + "top_level.txt", (PACKAGE + "\n").encode())
        self.record.append(info + "RECORD,,")
        self.write(info + "RECORD", ("\n".join(self.record) + "\n").encode())
        self.zip.close()
        return self.name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    files = _files()
    has_library = any(arc == "%s/%s" % (PACKAGE, LIBRARY) for _, arc in files)
    if not has_library:
        sys.stderr.write("vram: building the package without %s/%s: build it first with "
                         "go build -buildmode=c-shared -o python/vram/libvram.so ./cmd/libvram, "
                         "or set VRAM_LIBRARY at run time\n" % (PACKAGE, LIBRARY))
    tag = _tag(has_library)
    w = _Wheel(wheel_directory, p, tag)
    for path, arc in files:
        with open(path, "rb") as f:
            w.add(arc, f.read())
    return w.close(p, tag, purelib=not has_library)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this source folder on sys.path (pip install -e)."""
    p = _project()
    tag = "py3-none-any"
    w = _Wheel(wheel_directory, p, tag)
    w.add("__editable__.%s.pth" % w.dist, (ROOT + "\n").encode())
    return w.close(p, tag, purelib=True)


def build_sdist(sdist_directory, config_settings=None):
    """The sources: pyproject.toml, this backend and the package, without a built library."""
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    members = [(os.path.join(ROOT, "pyproject.toml"), "pyproject.toml"),
               (os.path.abspath(__file__), "_backend/" + os.path.basename(__file__))]
    members += [(path, arc) for path, arc in _files()
                if not arc.endswith(("/" + LIBRARY, "/libvram.h"))]
    pkg_info = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (p["name"], p["version"])).encode()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, arc in members:
            tar.add(path, arcname=base + "/" + arc, recursive=False)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
    return name
