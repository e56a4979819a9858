"""ragkv_build: the in-tree PEP 517 backend of ragkv-client (stdlib only).

build_wheel generates the ragkv.v1 stubs from the .proto files (the repo's
proto/ next to connector/, or the copy an sdist carries in proto/) and
zips them with the ragkv_client package into a pure-Python wheel;
build_sdist packs the sources with that proto copy. No build requirement is
downloaded, so `pip install ./connector/python` works offline.
"""
import base64
import glob
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _dist_name(p):
    return p["name"].replace("-", "_")


def _proto_dir():
    for d in (os.environ.get("RAGKV_PROTO_DIR", ""), os.path.join(ROOT, "..", "..", "proto"),
              os.path.join(ROOT, "proto")):
        if d and os.path.isdir(os.path.join(d, "ragkv", "v1")):
            return os.path.abspath(d)
    raise RuntimeError("ragkv_build: no proto/ragkv/v1 found (set RAGKV_PROTO_DIR)")


def _protoc_commands(proto_dir, out):
    """Candidate generator commands, best first."""
    args = [f"--proto_path={proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}"]
    protos = sorted(glob.glob(os.path.join(proto_dir, "ragkv", "v1", "*.proto")))
    cmds = []
    for py in (sys.executable, "/usr/bin/python3"):
        cmds.append([py, "-m", "grpc_tools.protoc"] + args + protos)
    plugin = shutil.which("grpc_python_plugin")
    if shutil.which("protoc") and plugin:
        cmds.append(["protoc", f"--plugin=protoc-gen-grpc_python={plugin}"] + args + protos)
    return cmds


def _generate_stubs(out):
    proto_dir = _proto_dir()
    # A clean environment: the build runs isolated, /usr/bin/python3 must
    # see its own site-packages.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    errors = []
    for cmd in _protoc_commands(proto_dir, out):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode == 0:
            for pkg in ("ragkv", os.path.join("ragkv", "v1")):
                open(os.path.join(out, pkg, "__init__.py"), "a").close()
            return
        errors.append(f"{cmd[0]}: {r.stderr.strip()[:300]}")
    raise RuntimeError("ragkv_build: cannot generate the stubs:\n" + "\n".join(errors))


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}"]
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    name = f"{_dist_name(p)}-{p['version']}-py3-none-any.whl"
    info = f"{_dist_name(p)}-{p['version']}.dist-info"
    files = {}
    with tempfile.TemporaryDirectory() as gen:
        _generate_stubs(gen)
        for base, top in ((gen, "ragkv"), (ROOT, "ragkv_client")):
            for path in sorted(glob.glob(os.path.join(base, top, "**", "*.py"), recursive=True)):
                with open(path, "rb") as f:
                    files[os.path.relpath(path, base)] = f.read()
    files[f"{info}/METADATA"] = _metadata(p).encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: ragkv_build\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [_record_line(arc, data) for arc, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{_dist_name(p)}-{p['version']}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "_build", "ragkv_client", "examples"):
            if os.path.exists(os.path.join(ROOT, rel)):
                t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}",
                      filter=lambda i: None if "__pycache__" in i.name else i)
        t.add(os.path.join(_proto_dir(), "ragkv"), arcname=f"{base}/proto/ragkv")
        pkg_info = _metadata(p).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
