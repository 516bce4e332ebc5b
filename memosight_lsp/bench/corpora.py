"""Real third-party projects in every language the server indexes, pinned and cached.

Evaluation data for the benchmarks and the tests that need real code of a language: npm
tarballs that ship their sources, Debian packages that ship source (Go's `golang-*-dev`, Rust's
`librust-*-dev`, header-only C/C++ libraries) or Debian source tarballs (`*.orig.tar.*`), and
Python sdists through pip. Each is pinned by URL and sha256 and unpacked once into
`$XDG_CACHE_HOME/memosight/corpora/<name>-<version>/` (a folder appears whole or not at all), so
only the first use downloads. Never training data: the model has not seen these projects.

    memosight bench corpora [--langs go,rust] [--fetch] [--held-out]   # what there is
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from memosight_lsp.workspace import language_for
from memosight_lsp.workspace.languages import HEADER_SNIFF_BYTES, for_content

Source = Literal["npm", "debian", "pypi"]
DOWNLOAD_TIMEOUT_S = 120
MAX_DOWNLOAD_BYTES = 256 * 2**20  # no pinned archive is near this: a bigger answer is wrong
DEBIAN = "http://deb.debian.org/debian/pool/main"
NPM = "https://registry.npmjs.org"


class CorpusError(RuntimeError):
    """A project could not be fetched or unpacked (no network, a changed archive)."""


@dataclass(frozen=True, kw_only=True)
class Project:
    name: str
    language: str  # workspace.LanguageSpec name of most of its files
    version: str
    source: Source
    url: str  # the archive (npm, debian) or the pip requirement (pypi)
    sha256: str
    root: str  # the folder inside the unpacked archive that holds the sources

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


PROJECTS: tuple[Project, ...] = (
    Project(
        name="tomlkit",
        language="python",
        version="0.13.2",
        source="pypi",
        url="tomlkit==0.13.2",
        sha256="fff5fe59a87295b278abd31bec92c15d9bc4a06885ab12bcea52c71119392e79",
        root="tomlkit-0.13.2/tomlkit",
    ),
    Project(
        name="marshmallow",
        language="python",
        version="3.21.3",
        source="pypi",
        url="marshmallow==3.21.3",
        sha256="4f57c5e050a54d66361e826f94fba213eb10b67b2fdb02c3e0343ce207ba1662",
        root="marshmallow-3.21.3/src/marshmallow",
    ),
    Project(
        name="immer",
        language="typescript",
        version="10.1.1",
        source="npm",
        url=f"{NPM}/immer/-/immer-10.1.1.tgz",
        sha256="946cc79684ad1e080b09d4f2da14247b272aa667f3aaa100f35846148689f08f",
        root="package/src",
    ),
    Project(
        name="mobx",
        language="typescript",
        version="6.13.5",
        source="npm",
        url=f"{NPM}/mobx/-/mobx-6.13.5.tgz",
        sha256="b85a7f765065c081724a7c49e91f59950151607b2f1c5a77c8ec4231f7129a1b",
        root="package/src",
    ),
    Project(
        name="express",
        language="javascript",
        version="4.21.2",
        source="npm",
        url=f"{NPM}/express/-/express-4.21.2.tgz",
        sha256="fc43a91e7dc7affb53c6ad7123a4f35485ed3c45226ae7a3847b7738e783e008",
        root="package",
    ),
    Project(
        name="pflag",
        language="go",
        version="1.0.6",
        source="debian",
        url=f"{DEBIAN}/g/golang-github-spf13-pflag/"
        "golang-github-spf13-pflag-dev_1.0.6%7egit20210604-d5e0c0615ace-1_all.deb",
        sha256="bd1c3c2a3e47512a64da02ebea900eb5a3f3c5d386e559d5718a3a935c0ea570",
        root="usr/share/gocode/src/github.com/spf13/pflag",
    ),
    Project(
        name="cobra",
        language="go",
        version="1.6.1",
        source="debian",
        url=f"{DEBIAN}/g/golang-github-spf13-cobra/golang-github-spf13-cobra-dev_1.6.1-1_all.deb",
        sha256="4f5d20855133319beef3c5b49d3c21a0406f270bf94fb4b6f4d406b691283cb2",
        root="usr/share/gocode/src/github.com/spf13/cobra",
    ),
    Project(
        name="anyhow",
        language="rust",
        version="1.0.69",
        source="debian",
        url=f"{DEBIAN}/r/rust-anyhow/librust-anyhow-dev_1.0.69-1_amd64.deb",
        sha256="f877f024d95d8af3c3f62e2cf74e6ba5eb976a3cf27c920bda786cd32029b79d",
        root="usr/share/cargo/registry/anyhow-1.0.69",
    ),
    Project(
        name="itertools",
        language="rust",
        version="0.10.3",
        source="debian",
        url=f"{DEBIAN}/r/rust-itertools/librust-itertools-dev_0.10.3-1_amd64.deb",
        sha256="3e13fc328508275c2c84270133f41a300ffb58b9b77001b89373ba7f7ab57fde",
        root="usr/share/cargo/registry/itertools-0.10.3",
    ),
    Project(
        name="commons-csv",
        language="java",
        version="1.9.0",
        source="debian",
        url=f"{DEBIAN}/c/commons-csv/commons-csv_1.9.0.orig.tar.xz",
        sha256="661252998cf2b9aac1aa12fe9e104dc23190761a8971384f83a6c1fc02536867",
        root="commons-csv-rel-commons-csv-1.9.0/src/main/java",
    ),
    Project(
        name="stb",
        language="c",
        version="0.0-git20220908",
        source="debian",
        url=f"{DEBIAN}/libs/libstb/libstb-dev_0.0%7egit20220908.8b5f1f3%2bds-1_amd64.deb",
        sha256="4f85f82942c61845ac96d64d722ef1b2f4897d6662cb98bc5ff78596b8fbb144",
        root="usr/include/stb",
    ),
    Project(
        name="spdlog",
        language="cpp",
        version="1.10.0",
        source="debian",
        url=f"{DEBIAN}/s/spdlog/libspdlog-dev_1.10.0%2bds-0.4_amd64.deb",
        sha256="4e19d647fe9bc9ec6a1fae81be00a69b1796b41660e8a7a4cf567264b463dcfb",
        root="usr/include/spdlog",
    ),
    Project(
        name="nlohmann-json",
        language="cpp",
        version="3.11.2",
        source="debian",
        url=f"{DEBIAN}/n/nlohmann-json3/nlohmann-json3-dev_3.11.2-2_all.deb",
        sha256="ec57940def6b6186c30be0e0ee81d1e58f86d11a54a145b28686a1e3e4aae801",
        root="usr/include/nlohmann",
    ),
)

# A second project per language that no default was chosen on (`bench quality --held-out`):
# the defaults are tuned on PROJECTS, and a gain that holds only there is the cases', not the
# setting's. No test uses them, so a fresh machine's test run does not download them.
HELD_OUT: tuple[Project, ...] = (
    Project(
        name="toolz",
        language="python",
        version="0.12.1",
        source="pypi",
        url="toolz==0.12.1",
        sha256="ecca342664893f177a13dac0e6b41cbd8ac25a358e5f215316d43e2100224f4d",
        root="toolz-0.12.1/toolz",
    ),
    Project(
        name="zod",
        language="typescript",
        version="4.6.7",
        source="npm",
        url=f"{NPM}/zod/-/zod-4.6.7.tgz",
        sha256="84efd155bed93270286e793fc951be270b536cbd5b0eeb111f0fa3967201d698",
        root="package/src/v4/core",
    ),
    Project(
        name="afero",
        language="go",
        version="1.9.3",
        source="debian",
        url=f"{DEBIAN}/g/golang-github-spf13-afero/golang-github-spf13-afero-dev_1.9.3-1_all.deb",
        sha256="e36ecb5c458967c948654f5a906cdb435110bfffbdc3c30e6a4021c0ec05146b",
        root="usr/share/gocode/src/github.com/spf13/afero",
    ),
    Project(
        name="semver",
        language="rust",
        version="1.0.14",
        source="debian",
        url=f"{DEBIAN}/r/rust-semver/librust-semver-dev_1.0.14-1_amd64.deb",
        sha256="bf3719b7aac4b7f16f0d68a7037306dbc1532758fe7a5dea01254e85cecaca8c",
        root="usr/share/cargo/registry/semver-1.0.14",
    ),
    Project(
        name="commons-io",
        language="java",
        version="2.11.0",
        source="debian",
        url=f"{DEBIAN}/c/commons-io/commons-io_2.11.0.orig.tar.gz",
        sha256="5a55361cf2b97228f94b3c65e3a4af784581debe322be551c44b2776db1c6483",
        root="commons-io-2.11.0-src/src/main/java",
    ),
    Project(
        name="jansson",
        language="c",
        version="2.14",
        source="debian",
        url=f"{DEBIAN}/j/jansson/jansson_2.14.orig.tar.gz",
        sha256="c739578bf6b764aa0752db9a2fdadcfe921c78f1228c7ec0bb47fa804c55d17b",
        root="jansson-2.14/src",
    ),
    Project(
        name="toml11",
        language="cpp",
        version="3.7.1",
        source="debian",
        url=f"{DEBIAN}/t/toml11/libtoml11-dev_3.7.1-3_all.deb",
        sha256="db87743e7840a1956c172961a21e5f1e0928524ed9a97c48d6152bbb778fe6ca",
        root="usr/include/toml",
    ),
)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "corpora"


def projects(languages: Iterable[str] | None = None, held_out: bool = False) -> list[Project]:
    """The pinned projects (HELD_OUT's with `held_out`), of these languages only when given."""
    wanted = None if languages is None else set(languages)
    return [
        p for p in (HELD_OUT if held_out else PROJECTS) if wanted is None or p.language in wanted
    ]


def fetch(project: Project, cache: Path | None = None) -> Path:
    """The folder of the project's sources, downloaded and unpacked on first use.
    Raises CorpusError when it cannot be had (offline, a hash that does not match)."""
    folder = (cache or cache_root()) / project.key
    if (folder / ".complete").is_file():
        return folder / project.root
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{project.key}-") as tmp:
        archive = _download(project, Path(tmp))
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != project.sha256:
            raise CorpusError(f"{project.key}: sha256 {digest} is not the pinned {project.sha256}")
        unpacked = Path(tmp) / "tree"
        _unpack(archive, unpacked)
        if not (unpacked / project.root).is_dir():
            raise CorpusError(f"{project.key}: the archive has no {project.root}/")
        (unpacked / ".complete").write_text(json.dumps({"sha256": digest}))
        shutil.rmtree(folder, ignore_errors=True)  # a half-written folder of a killed fetch
        unpacked.rename(folder)  # whole or not at all
    return folder / project.root


def source_files(root: Path, language: str | None = None, limit: int = 5000) -> list[Path]:
    """The project's source files (of `language` when given), sorted, at most `limit`."""
    found: list[Path] = []
    for path in sorted(root.rglob("*")):
        if len(found) >= limit:
            break
        spec = language_for(str(path), None) if path.is_file() else None
        if spec is not None and path.suffix.lower() == ".h":  # C or C++ by its text
            with path.open("rb") as handle:
                spec = for_content(spec, path, handle.read(HEADER_SNIFF_BYTES))
        if spec is not None and (language is None or spec.name == language):
            found.append(path)
    return found


def _download(project: Project, into: Path) -> Path:
    if project.source == "pypi":
        return _pip_download(project.url, into)
    target = into / Path(project.url.rsplit("/", 1)[-1]).name
    try:
        with urllib.request.urlopen(project.url, timeout=DOWNLOAD_TIMEOUT_S) as answer:
            data = answer.read(MAX_DOWNLOAD_BYTES + 1)
    except OSError as err:
        raise CorpusError(f"{project.key}: cannot download {project.url}: {err}") from err
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise CorpusError(f"{project.key}: {project.url} is larger than expected")
    target.write_bytes(data)
    return target


def _pip_download(requirement: str, into: Path) -> Path:
    """A source distribution through pip (its index settings: the registry or a local mirror)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--no-binary",
        ":all:",
        "-d",
        str(into),
        requirement,
    ]
    try:
        subprocess.run(
            command, check=True, capture_output=True, timeout=DOWNLOAD_TIMEOUT_S, text=True
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise CorpusError(f"cannot download {requirement} with pip: {err}") from err
    archives = [p for p in into.iterdir() if p.is_file()]
    if len(archives) != 1:
        raise CorpusError(f"pip downloaded {len(archives)} files for {requirement}")
    return archives[0]


def _unpack(archive: Path, into: Path) -> None:
    into.mkdir()
    if archive.suffix == ".deb":
        name, payload = _deb_data(archive.read_bytes())
        _compression(name)  # raises for a compression tarfile cannot read
        with tarfile.open(fileobj=io.BytesIO(payload)) as tar:  # the compression is detected
            tar.extractall(into, filter="data")
        return
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")


def _deb_data(deb: bytes) -> tuple[str, bytes]:
    """The data.tar.* member of a .deb (an `ar` archive: 8-byte magic, then 60-byte headers)."""
    if not deb.startswith(b"!<arch>\n"):
        raise CorpusError("not a Debian package (no ar magic)")
    offset = 8
    while offset + 60 <= len(deb):  # each member moves the offset forward by its header at least
        header = deb[offset : offset + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip() or 0)
        body = deb[offset + 60 : offset + 60 + size]
        if name.startswith("data.tar"):
            return name, body
        offset += 60 + size + (size % 2)
    raise CorpusError("the Debian package has no data.tar member")


def _compression(name: str) -> None:
    if name.endswith(".zst"):
        raise CorpusError("zstd-compressed Debian package: not supported")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="memosight bench corpora",
        description="The pinned third-party projects the benchmarks evaluate on.",
    )
    parser.add_argument("--langs", help="comma-separated languages (default: all)")
    parser.add_argument("--fetch", action="store_true", help="download what is not cached yet")
    parser.add_argument("--held-out", action="store_true", help="the projects no default saw")
    args = parser.parse_args(argv)
    languages = args.langs.split(",") if args.langs else None
    rows = []
    for project in projects(languages, held_out=args.held_out):
        root = cache_root() / project.key / project.root
        error = None
        if args.fetch:
            try:
                root = fetch(project)
            except CorpusError as err:
                error = str(err)
        cached = (cache_root() / project.key / ".complete").is_file()
        files = len(source_files(root, project.language)) if cached else None
        rows.append(
            {
                "name": project.name,
                "language": project.language,
                "version": project.version,
                "cached": cached,
                "path": str(root),
                "files": files,
                **({"error": error} if error else {}),
            }
        )
    sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    return 1 if any("error" in row for row in rows) else 0
