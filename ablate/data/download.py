"""The real data sets' raw files, fetched on first use and checked against known checksums.

MNIST (its four gzipped IDX files) and the TU data sets PROTEINS, DD and COLLAB (one zip
each) are read from a data folder: ``data.path`` when given, else ``data`` in the dataset
cache folder (`ablate.data.cache.cache_dir`). When the folder does not hold them,
`ensure_files` downloads them with PyG's `download_url` / `extract_zip`, the way
torchvision's MNIST and PyG's `TUDataset` fetch the same files:

- Base URLs are settings: ``data.url`` (one study), else ``$ABLATE_MNIST_URL`` /
  ``$ABLATE_TU_URL``, else the defaults below (torchvision's first MNIST mirror; the host
  of PyG's `TUDataset.url`). A mirror or a test server stands in for either.
- Integrity: every file fetched has a known checksum (`CHECKSUMS`, extended or replaced
  per file by the JSON file named by ``$ABLATE_DATA_CHECKSUMS``). A file is downloaded
  into a hidden folder unique to the call inside the data folder, checked, and only
  then renamed into place, so a failed check, a truncated transfer or a crash leaves
  nothing a later run would read. Two drivers fetching at once each work in their own
  temp folder; the installing rename is atomic and the loser discards its copy.
- What is verified: MNIST by the MD5 sums torchvision publishes for these files; the TU
  zips by the SHA-256 sums registered for the same URLs in the Julia package
  GraphDatasets.jl (DataDeps). Neither publisher is the data's author: a host that
  re-packs its files breaks the check (refused, never read); set the new sum in
  ``$ABLATE_DATA_CHECKSUMS`` once you trust the file. PyG's `download_url` does not
  verify TLS certificates, so these checksums are what vouch for the bytes. Files put
  in the folder by hand are not checked (they may be a different, equally valid copy).
- ``$ABLATE_DOWNLOAD=0`` forbids downloads (the runner sets it in Ray workers: the driver
  prepares every data set once and ships the prepared cache to other nodes).

Every refusal is one `ConfigError` line (the CLI exits 2) naming what failed and where
to put the files by hand. Files the user put in the folder are never moved or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from ablate.errors import ConfigError

ENV_ALLOW = "ABLATE_DOWNLOAD"  # "0": never download in this process (Ray workers)
ENV_CHECKSUMS = "ABLATE_DATA_CHECKSUMS"  # JSON file: {file name: "md5:HEX" | "sha256:HEX"}
URL_SCHEMES = ("http", "https", "ftp", "file")
TIMEOUT_S = 60.0  # per socket operation while downloading (connect, each read)
PROBE_TIMEOUT_S = 10.0

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
TU_REQUIRED = ("A", "graph_indicator", "graph_labels")  # NAME_<part>.txt (ablate.data.tu)

# file name -> (hash algorithm, hex digest). MNIST: the MD5 sums torchvision lists for its
# MNIST resources. TU: SHA-256 of NAME.zip as registered in GraphDatasets.jl (src/TUDatasets.jl,
# `dataset_hash`) for https://www.chrsmrrs.com/graphkerneldatasets/NAME.zip.
CHECKSUMS: dict[str, tuple[str, str]] = {
    "train-images-idx3-ubyte.gz": ("md5", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "train-labels-idx1-ubyte.gz": ("md5", "d53e105ee54ea40749a09fcbcd1e9432"),
    "t10k-images-idx3-ubyte.gz": ("md5", "9fb629c4189551a2d022fa330f9573f3"),
    "t10k-labels-idx1-ubyte.gz": ("md5", "ec29112dd5afa0611ce80d1b7f02629c"),
    "PROTEINS.zip": ("sha256", "2da8de15284b88edabca2888ce5444d62f364ed41159260977088c4e53d4d848"),
    "DD.zip": ("sha256", "d033d7aeb1a48c4b2b47cf0390e7fc9671de70d98c8df5b11e458d2ec5515cd2"),
    "COLLAB.zip": ("sha256", "cb5b772bc4f3a4690d0601378a3fc993b092aeafd63e2b0f2330137dda1cdcc6"),
}
# Bytes of each file, where known (MNIST: 11,594,722 in all); the TU zip sizes are not known here.
SIZES = {"train-images-idx3-ubyte.gz": 9912422, "train-labels-idx1-ubyte.gz": 28881,
         "t10k-images-idx3-ubyte.gz": 1648877, "t10k-labels-idx1-ubyte.gz": 4542}


@dataclass(frozen=True)
class Source:
    """Where one data set's raw files come from and how they sit in the data folder."""

    label: str  # MNIST, PROTEINS, DD, COLLAB
    env: str  # environment variable holding a base URL
    default_url: str
    files: tuple[str, ...]  # fetched as base URL + "/" + name


_MNIST = Source("MNIST", "ABLATE_MNIST_URL", "https://ossci-datasets.s3.amazonaws.com/mnist",
                tuple(f + ".gz" for f in MNIST_FILES))
_TU_URL = "https://www.chrsmrrs.com/graphkerneldatasets"  # torch_geometric TUDataset.url
SOURCES: dict[str, Source] = {
    "mnist_sp": _MNIST,
    "proteins": Source("PROTEINS", "ABLATE_TU_URL", _TU_URL, ("PROTEINS.zip",)),
    "dd": Source("DD", "ABLATE_TU_URL", _TU_URL, ("DD.zip",)),
    "collab": Source("COLLAB", "ABLATE_TU_URL", _TU_URL, ("COLLAB.zip",)),
}


def source(name: str) -> Source:
    """Where dataset `name`'s raw files come from: a built-in's, or the TU site's NAME.zip for
    `tu:NAME` (`ablate.data.tu_named`)."""
    if name.startswith("tu:"):
        return Source(name[3:], "ABLATE_TU_URL", _TU_URL, (f"{name[3:]}.zip",))
    return SOURCES[name]


def downloadable(name: str) -> bool:
    """Whether dataset `name` reads raw files that `ensure_files` can fetch."""
    return name in SOURCES or name.startswith("tu:")


def check_url(url: str, what: str = "data.url") -> str:
    """`url` without a trailing slash if it is an http(s), ftp or file URL, else one ConfigError."""
    text = str(url).strip()
    parts = urlparse(text)
    ok = (parts.scheme in URL_SCHEMES and " " not in text
          and (bool(parts.netloc) if parts.scheme != "file" else bool(parts.path)))
    if not ok:
        raise ConfigError(f"{what} {url!r} is not a URL: give the base address of a mirror, e.g. "
                          f"https://host/folder ({', '.join(URL_SCHEMES)})")
    return text.rstrip("/")


def base_url(name: str, url: str | None = None) -> str:
    """The base URL for dataset `name`: `url` (data.url), else its environment variable, else
    the default."""
    src = source(name)
    if url is not None:
        return check_url(url)
    env = os.environ.get(src.env)
    return check_url(env, f"${src.env}") if env else src.default_url


def data_folder(path: str | os.PathLike | None) -> Path:
    """The folder raw files are read from: `path` (data.path), else ``data`` in the cache folder."""
    from ablate.data.cache import cache_dir

    return Path(path).expanduser() if path is not None else cache_dir() / "data"


def _located(name: str, path: str | None) -> tuple[Source, Path, bool]:
    """(source, data folder, whether it holds every raw file); a half-filled folder (some
    files there, some not) is refused, never completed over what the user put there."""
    folder = _usable_folder(name, path)
    present, missing = _inventory(name, folder)
    if missing and present:
        raise _half_filled(name, folder, present, missing)
    return source(name), folder, not missing


def ensure_files(name: str, path: str | None = None, url: str | None = None,
                 progress: bool = False) -> Path:
    """The data folder of dataset `name`, holding its raw files: downloaded and checked if the
    folder has none of them (a line on stderr says so when `progress`); a half-filled folder,
    a missing data.path or a failed download is one ConfigError line."""
    src, folder, complete = _located(name, path)
    if complete:
        return folder
    if os.environ.get(ENV_ALLOW, "1") == "0":
        raise ConfigError(f"{src.label} files are not in {str(folder)!r} and this process may not "
                          f"download (${ENV_ALLOW}=0; Ray workers get the driver's prepared "
                          f"dataset); put {_names(src)} there by hand")
    fetch(name, folder, base_url(name, url), progress)
    return folder


def check_files(name: str, path: str | None = None, url: str | None = None,
                probe: bool = True) -> str | None:
    """What a run would do for dataset `name`, checked without downloading (dry runs): None when
    the files are there, else a note naming the download (what, how many MB, from where, into
    which folder); refusals as in `ensure_files`. A server not reachable from here (offline) is
    said in the note, so that a dry run plans a study before any data is there; a mirror named
    by `url` (data.url=) that does not answer is refused as a failed download is. `probe`
    False: the folder alone is checked, the server not asked (a run, which downloads next)."""
    src, folder, complete = _located(name, path)
    if complete:
        return None
    base = base_url(name, url)
    anchor = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if anchor is None or not os.access(anchor, os.W_OK | os.X_OK):
        raise _not_writable(src, folder, "it is not writable")
    size = sum(SIZES.get(f, 0) for f in src.files)
    amount = f"{size / 1e6:.1f} MB" if all(f in SIZES for f in src.files) else "size not known"
    note = (f"{src.label}: {len(src.files)} file(s) ({amount}) will be downloaded from {base} "
            f"into {folder} by the first run")
    if not probe:
        return note
    try:
        _probe(src, folder, f"{base}/{src.files[0]}")
    except Unreachable as e:
        if url is not None:  # the mirror named by data.url= does not answer: refused
            raise
        return (f"{note}; not reachable from here now ({e.reason}): run where {base} is "
                f"reachable, or {_by_hand(src, folder)}")
    return note


def fetch(name: str, folder: Path, base: str, progress: bool = False) -> None:
    """Download, check and install dataset `name`'s files into `folder` (see the module doc)."""
    from torch_geometric.data import download_url

    src = source(name)
    tmp = _temp_folder(src, folder)
    if progress:
        print(f"downloading {src.label} ({_names(src)}) from {base} into {folder}",
              file=sys.stderr, flush=True)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(TIMEOUT_S)  # download_url opens its URL without a timeout
    try:
        staged = tmp / "staged"
        known = checksums()  # read once per fetch
        for fname in src.files:
            url = f"{base}/{fname}"
            try:
                download_url(url, str(tmp), log=False, filename=fname)
            except Exception as e:  # no network, refused, HTTP error, reset mid-transfer
                raise ConfigError(f"cannot download {url} ({_reason(e)}): no network or no such "
                                  f"file; {_by_hand(src, folder)}") from None
            first_use = name.startswith("tu:") and fname not in known
            if first_use:  # a TU set with no published sum: trusted now, its sum recorded
                record = {"file": fname, "url": url,
                          "sha256": file_digest(tmp / fname, "sha256"), "checked": False}
            else:
                verify(tmp / fname, src, folder, url, known)
                algo, digest = known[fname]
                record = {"file": fname, "url": url, algo: digest, "checked": True}
        _stage(name, tmp, staged)
        if src is not _MNIST:
            (staged / src.label / SOURCE_RECORD).write_text(json.dumps(record, indent=1) + "\n")
            if first_use and progress:
                print(f"{fname}: no published checksum; SHA-256 {record['sha256']} recorded in "
                      f"{folder / src.label / SOURCE_RECORD} (trusted on first use)",
                      file=sys.stderr, flush=True)
        _install(name, staged, folder)
    finally:
        socket.setdefaulttimeout(previous)
        shutil.rmtree(tmp, ignore_errors=True)  # only our own unique temp folder


def verify(file: Path, src: Source, folder: Path, url: str,
           table: dict[str, tuple[str, str]] | None = None) -> None:
    """`file` matches its known checksum (`table`, default `checksums()`), or one ConfigError
    (the caller removes the file)."""
    known = (table if table is not None else checksums()).get(file.name)
    if known is None:
        raise ConfigError(f"no checksum known for {file.name} from {url}; add it to "
                          f"${ENV_CHECKSUMS} (a JSON file of name: \"sha256:HEX\") or "
                          f"{_by_hand(src, folder)}")
    algo, want = known
    got = file_digest(file, algo)
    if got != want:
        size = file.stat().st_size
        expect = f", expected {SIZES[file.name]} bytes" if file.name in SIZES else ""
        raise ConfigError(f"{file.name} from {url} failed its {algo} check ({size} bytes{expect}; "
                          f"{algo} {got[:12]}... is not {want[:12]}...: truncated or altered), "
                          f"nothing was kept; {_by_hand(src, folder)}")


SOURCE_RECORD = ".ablate-source.json"  # beside a downloaded TU set's files: its zip's sum


def source_record(folder: Path) -> dict | None:
    """What `fetch` recorded of the zip a TU set's files came from (file, url, sha256 or md5,
    `checked`: whether against a published sum), or None for files put there by hand."""
    try:
        return json.loads((folder / SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        return None


def file_digest(path: Path, algo: str) -> str:
    """Hex digest of a file."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algo).hexdigest()


def checksums() -> dict[str, tuple[str, str]]:
    """`CHECKSUMS` updated with the JSON file named by ``$ABLATE_DATA_CHECKSUMS`` (if set)."""
    table = dict(CHECKSUMS)
    extra = os.environ.get(ENV_CHECKSUMS)
    if not extra:
        return table
    try:
        entries = json.loads(Path(extra).expanduser().read_text())
        for fname, value in entries.items():
            algo, _, digest = str(value).partition(":")
            if algo not in hashlib.algorithms_guaranteed or len(digest) != 2 * hashlib.new(
                    algo).digest_size or not all(c in "0123456789abcdef" for c in digest.lower()):
                raise ValueError(f"{fname}: {value!r}")
            table[str(fname)] = (algo, digest.lower())
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigError(f"${ENV_CHECKSUMS}={extra!r} must name a JSON file of file name: "
                          f"\"ALGO:HEX\" (e.g. \"sha256:...\"): {e}") from None
    return table


# ------------------------------------------------------------------------- the data folder


def _usable_folder(name: str, path: str | None) -> Path:
    """The data folder; a data.path that is not an existing folder is refused (a typo would
    otherwise download into a new folder)."""
    folder = data_folder(path)
    if path is not None and not folder.is_dir():
        src = source(name)
        raise ConfigError(f"{src.label} directory {str(folder)!r} (data.path) does not exist; create it to "
                          f"download {src.label} there, or leave data.path unset to use "
                          f"{data_folder(None)}")
    return folder


def _inventory(name: str, folder: Path) -> tuple[list[str], list[str]]:
    """(present, missing) file names of dataset `name` in the best of its accepted places:
    MNIST in FOLDER, FOLDER/raw or FOLDER/MNIST/raw (plain or .gz, also the dotted spelling);
    TU in FOLDER, FOLDER/NAME or FOLDER/NAME/raw. Nothing missing = complete somewhere."""
    if source(name) is _MNIST:
        places = (folder, folder / "raw", folder / "MNIST" / "raw")
        wanted = {f: (f, f + ".gz", f.replace("-idx", ".idx"), f.replace("-idx", ".idx") + ".gz")
                  for f in MNIST_FILES}
        extra: set[str] = set()
    else:
        label = source(name).label
        places = (folder, folder / label, folder / label / "raw")
        wanted = {f"{label}_{r}.txt": (f"{label}_{r}.txt",) for r in TU_REQUIRED}
        extra = {p.name for place in places if place.is_dir() for p in place.glob(f"{label}_*.txt")}
    best: list[str] = []
    for place in places:
        have = [f for f, spellings in wanted.items() if any((place / s).is_file() for s in spellings)]
        if len(have) > len(best):
            best = have
    missing = [f for f in wanted if f not in best]
    present = sorted(set(best) | (extra if missing else set()))
    return present, missing


def _temp_folder(src: Source, folder: Path) -> Path:
    """A new hidden folder inside `folder`, unique to this call; refused in one line when
    `folder` cannot be written."""
    tmp = folder / f".download-{src.label}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        _make_temp(tmp)
    except OSError as e:
        raise _not_writable(src, folder, _reason(e)) from None
    return tmp


def _make_temp(tmp: Path) -> None:
    tmp.mkdir(parents=True)


def _stage(name: str, tmp: Path, staged: Path) -> None:
    """Lay the checked downloads out as they will sit in the data folder, inside `staged`:
    MNIST/raw/*.gz, or NAME/NAME_*.txt from the zip."""
    from torch_geometric.data import extract_zip

    src = source(name)
    if src is _MNIST:
        raw = staged / "MNIST" / "raw"
        raw.mkdir(parents=True)
        for fname in src.files:
            os.replace(tmp / fname, raw / fname)
        return
    unzipped = tmp / "unzipped"
    try:
        extract_zip(str(tmp / src.files[0]), str(unzipped), log=False)
    except Exception as e:  # a checked zip that still does not open: a bad checksum entry
        raise ConfigError(f"{src.files[0]} passed its checksum but cannot be unzipped "
                          f"({_reason(e)})") from None
    found = [p.parent for p in unzipped.rglob(f"{src.label}_A.txt")]
    if not found:
        raise ConfigError(f"{src.files[0]} holds no {src.label}_A.txt")
    staged.mkdir()
    os.replace(found[0], staged / src.label)


def _install(name: str, staged: Path, folder: Path) -> None:
    """Move the staged top folder (MNIST or NAME) into `folder`: one atomic rename when the
    target does not exist; else file by file into it (never replacing a file there). A
    concurrent driver that installed first wins; this copy is dropped."""
    (top,) = list(staged.iterdir())
    target = folder / top.name
    try:
        os.rename(top, target)
        return
    except OSError:
        if not _inventory(name, folder)[1]:
            return  # another driver installed the same checked files meanwhile
    for file in sorted(p for p in top.rglob("*") if p.is_file()):
        dest = target / file.relative_to(top)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            os.replace(file, dest)


class Unreachable(ConfigError):
    """`_probe`: the server of a download does not answer (offline, no such host, refused)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _probe(src: Source, folder: Path, url: str) -> None:
    """Open `url` (HEAD, a short timeout) to learn whether a run could download it; a server
    that cannot be reached raises `Unreachable`, one that refuses the file `ConfigError`."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError as e:
        if e.code in (405, 501):  # the server exists but does not answer HEAD
            return
        raise ConfigError(f"cannot download {url} ({_reason(e)}); {_by_hand(src, folder)}") from None
    except Exception as e:
        raise Unreachable(f"cannot download {url} ({_reason(e)}): no network or no such file; "
                          f"{_by_hand(src, folder)}", _reason(e)) from None


# ------------------------------------------------------------------------- messages


def _names(src: Source) -> str:
    return ", ".join(src.files)


def _by_hand(src: Source, folder: Path) -> str:
    """Where the user puts the files instead."""
    if src is _MNIST:
        where = f"{_names(src)} into {folder / 'MNIST' / 'raw'} (or {folder})"
    else:
        where = f"the unzipped {src.files[0]} ({src.label}_A.txt, ...) into {folder / src.label}"
    return (f"put {where} by hand (or set data.path= to a folder holding them), or set "
            f"data.url= (${src.env}) to a mirror")


def _half_filled(name: str, folder: Path, present: list[str], missing: list[str]) -> ConfigError:
    src = source(name)
    return ConfigError(f"{src.label} folder {str(folder)!r} is half-filled: it has "
                       f"{', '.join(present)} but not {', '.join(missing)}; add the missing "
                       f"file(s) (from {src.default_url}) or move the others away (nothing "
                       "was downloaded or changed)")


def _not_writable(src: Source, folder: Path, why: str) -> ConfigError:
    return ConfigError(f"cannot download {src.label} into {str(folder)!r} ({why}): choose a "
                       f"writable data.path=, or {_by_hand(src, folder)}")


def _reason(e: BaseException) -> str:
    """A short, single-line reason for an exception."""
    reason = getattr(e, "reason", None)
    text = str(reason if reason is not None else e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]
