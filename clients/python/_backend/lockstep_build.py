"""A tiny PEP 517 build backend, standard library only.

PyPI is not reachable everywhere Lockstep runs, and pip's build isolation
would otherwise download setuptools; with this in-tree backend (no build
requirements at all) ``pip install ./clients/python`` works offline.
It builds a pure-Python wheel of the ``lockstep`` package.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "lockstep_client"
DIST = "lockstep-client"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"

METADATA = f"""Metadata-Version: 2.1
Name: {DIST}
Version: {VERSION}
Summary: Python client for Lockstep (versioned git workspaces for coding agents), standard library only
Requires-Python: >=3.8
License: Proprietary
"""

WHEEL = f"""Wheel-Version: 1.0
Generator: lockstep_build
Root-Is-Purelib: true
Tag: {TAG}
"""


def _files():
    pkg = os.path.join(ROOT, "lockstep")
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in sorted(filenames):
            if f.endswith(".pyc"):
                continue
            full = os.path.join(dirpath, f)
            yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _dist_info(dirname):
    return {
        f"{dirname}/METADATA": METADATA.encode(),
        f"{dirname}/WHEEL": WHEEL.encode(),
        f"{dirname}/top_level.txt": b"lockstep\n",
    }


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dirname = f"{NAME}-{VERSION}.dist-info"
    for name, data in _dist_info(dirname).items():
        path = os.path.join(metadata_directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return dirname


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def _wheel(wheel_directory, members):
    filename = f"{NAME}-{VERSION}-{TAG}.whl"
    dirname = f"{NAME}-{VERSION}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in list(members) + list(_dist_info(dirname).items()):
            z.writestr(name, data)
            records.append(_record_line(name, data))
        records.append(f"{dirname}/RECORD,,")
        z.writestr(f"{dirname}/RECORD", "\n".join(records) + "\n")
    return filename


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    members = []
    for full, rel in _files():
        with open(full, "rb") as f:
            members.append((rel, f.read()))
    return _wheel(wheel_directory, members)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(f"{NAME}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ("pyproject.toml", "README.md"):
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        for d in ("lockstep", "_backend"):
            t.add(os.path.join(ROOT, d), arcname=f"{base}/{d}",
                  filter=lambda ti: None if "__pycache__" in ti.name else ti)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    return filename
