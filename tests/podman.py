"""Podman for the image tests: a registry-less Debian base, builds that reach PyPI as the host's pip does."""

import configparser
import fcntl
import functools
import io
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

# Kept between runs: the base image and the build layers live in podman's storage; this holds podman's
# configuration for the tests and the lock that keeps two sessions from making the base at once.
CACHE = Path(os.environ.get("BENCHD_PODMAN_CACHE", "~/.cache/benchd-podman")).expanduser()
BASE_IMAGE = "localhost/debian-base:bookworm"
IMAGES = Path(__file__).parent / "images"  # the test-only images' Containerfiles (PostgreSQL, Prometheus)


def os_release() -> dict[str, str]:
    path = Path("/etc/os-release")
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value.strip('"') for key, value in pairs}


def debian_mirror(suite: str, apt: Path = Path("/etc/apt")) -> str | None:
    """The first Debian mirror apt uses here for `suite` (deb822 .sources or one-line .list files)."""
    for path in sorted(apt.glob("sources.list.d/*.sources")):
        for stanza in path.read_text().split("\n\n"):
            lines = [line for line in stanza.splitlines() if ":" in line and line[0] not in "# "]
            fields = {key: value.split() for key, value in (line.split(":", 1) for line in lines)}
            if "deb" in fields.get("Types", []) and suite in fields.get("Suites", []) and \
                    "main" in fields.get("Components", []):
                return fields["URIs"][0]
    for path in [apt / "sources.list", *sorted(apt.glob("sources.list.d/*.list"))]:
        for line in path.read_text().splitlines() if path.exists() else []:
            words = [w for w in line.split() if not w.startswith("[")]
            if len(words) >= 4 and words[0] == "deb" and words[2] == suite and "main" in words[3:]:
                return words[1]
    return None


def unavailable() -> str | None:
    """Why the image tests cannot run on this machine, or None."""
    release = os_release()
    if release.get("ID") != "debian":
        return f"podman image tests need a Debian host (this is {release.get('ID', 'unknown')})"
    if os.geteuid() != 0:
        return "podman image tests need root (rootful podman, debootstrap)"
    if debian_mirror(release.get("VERSION_CODENAME", "")) is None:
        return f"no Debian mirror for {release.get('VERSION_CODENAME')} in apt's sources"
    missing = [tool for tool in ("podman", "debootstrap", "runc") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (`make system-deps` installs them)"
    return None


@functools.cache
def containers_conf() -> Path:
    """runc (this VM refuses crun's setrlimit and hybrid cgroups) and limits no higher than the host allows:
    podman's defaults (nofile 1048576, nproc 4194304) are refused without CAP_SYS_RESOURCE."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
    return write(CACHE / "containers.conf",
                 f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                 '[engine]\nruntime = "runc"\n')


def write(path: Path, text: str) -> Path:
    """Replaced whole, so that another session reading it meanwhile never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)
    return path


def environment() -> dict[str, str]:
    """The environment podman (and podman-compose) run with."""
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf())}


def podman(*args: str, check: bool = True, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], check=False, env=environment(), capture_output=True, text=True,
                          timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        command = " ".join(args)
        raise AssertionError(f"podman {command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@contextmanager
def locked(name: str):
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def base_image() -> str:
    """Debian (minbase, the host's suite, the mirror apt uses), imported once and kept in podman's storage."""
    with locked("base"):
        if podman("image", "exists", BASE_IMAGE, check=False).returncode == 0:
            return BASE_IMAGE
        suite = os_release()["VERSION_CODENAME"]
        with tempfile.TemporaryDirectory(prefix="benchd-rootfs-") as root:
            subprocess.run(["debootstrap", "--variant=minbase", suite, root, debian_mirror(suite)],
                           check=True, capture_output=True, text=True, timeout=900)
            tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
            podman("import", "-", BASE_IMAGE, stdin=tar.stdout)
            assert tar.wait() == 0
        return BASE_IMAGE


def pip_mounts() -> list[str]:
    """`podman build` volumes that give every RUN step the host's pip configuration: one pip.conf merged from
    pip's files and PIP_* variables (as `pip config list` reports them) at /etc/pip.conf, and what it names
    on disk at their own paths under /tmp/pip-host: the CA bundle (PyPI is reached through this host's proxy),
    constraint files, wheel directories (the CPU torch) and file:// indexes. Their contents stay out of the image;
    buildah leaves the empty mount points."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True).stdout
    config = configparser.ConfigParser(interpolation=None)
    for line in sorted(listed.splitlines(), key=lambda line: line.startswith(":env:")):  # variables win
        key, _, value = line.partition("=")
        section, name = key.split(".", 1)
        section = "global" if section == ":env:" else section
        if not config.has_section(section):
            config.add_section(section)
        config[section][name] = value.strip("'\"")
    mounts: dict[str, str] = {}  # host path -> path in the build

    def inside(host: Path) -> str:
        # At the host's own path under /tmp/pip-host: a cached layer keeps its empty mount points, so a place
        # must never be a file in one build and a directory in another.
        host = host.resolve()
        return mounts.setdefault(str(host), f"/tmp/pip-host{host}")

    def location_inside(location: str, index: bool) -> str:
        parsed = urlparse(location)
        path = Path(parsed.path)
        if parsed.scheme not in ("", "file") or not path.exists():
            return location
        if index and path.name == "simple":
            # A PEP 503 index here links its files as ../../files/…: the directory above `simple` goes too.
            return f"file://{inside(path.parent)}/simple"
        return inside(path)

    for section in config.sections():
        settings = config[section]
        if "cert" in settings:
            settings["cert"] = inside(Path(settings["cert"]))
        for key in ("constraint", "requirement"):  # files pip reads on every install, e.g. a host's version caps
            if key in settings:
                settings[key] = " ".join(inside(Path(place)) for place in settings[key].split())
        for key in ("find-links", "index-url", "extra-index-url"):
            if key in settings:
                index = key != "find-links"
                settings[key] = " ".join(location_inside(place, index) for place in settings[key].split())
    text = io.StringIO()
    config.write(text)
    mounts[str(write(CACHE / "pip.conf", text.getvalue()))] = "/etc/pip.conf"
    return [f"--volume={host}:{path}:ro" for host, path in mounts.items()]


def build(tag: str, context: Path, **build_args: str) -> str:
    """The image's id, built with cached layers on the host's network, in Docker's format (an OCI image drops
    HEALTHCHECK). Tests run it by id: another session may move the tag meanwhile."""
    args = ["build", "--network=host", "--format=docker", "--layers", f"--tag={tag}", *pip_mounts()]
    args += [f"--build-arg={key}={value}" for key, value in build_args.items()]
    with tempfile.TemporaryDirectory() as scratch:
        podman(*args, f"--iidfile={scratch}/id", str(context), timeout=1800)
        return (Path(scratch) / "id").read_text().strip()
