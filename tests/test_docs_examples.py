"""The examples of the README and the docs work when copied: every study file shown in a
```yaml block (README.md, docs/*.md) dry-runs, every `python -m ablate.run` command line of
README.md and docs/*.md dry-runs offline (``dry_run=true results_dir=TMP`` added; an error a
doc quotes under its command is the one printed), and the README's Python example fails, on
a study not run yet, with one clear line.

Commands that cannot run here are skipped with the reason listed in `SKIP`; commands
changed to run here are changed as `ADAPT` says. No Ray starts, nothing is downloaded (the
download URLs of the tests point at a closed port: a dry run only notes the download)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ablate.run import main

ROOT = Path(__file__).resolve().parent.parent
COMMAND_DOCS = ("README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))))
STUDY_SECTIONS = {"fixed", "grid", "variants", "seeds"}  # a yaml block with one is a study file
ENTRY = "python -m ablate.run"

# a command holding this text is not run here, for this reason
SKIP = {
    "study=NAME": "a placeholder for any study (the other commands name real ones)",
    "reproduce=TRIAL_ID": "needs the id of a trial stored by an earlier run (TRIAL_ID is a "
                          "placeholder)",
    "ray_address=": "needs a running Ray cluster (ray up cluster.yaml)",
    "RAY_ADDRESS=": "needs a running Ray cluster (ray up cluster.yaml)",
    "ray job submit": "needs a running Ray cluster (ray up cluster.yaml)",
    "data.path=DIR": "DIR is a placeholder for the folder of the user's files",
    "data.path=/data/cifar": "needs the user's CIFAR-10 copy (nothing is downloaded; "
                             "tests/test_sdc.py checks its refusal without one)",
}
GPU_ONLY = {"device=cuda": "needs a GPU (device=cuda is refused without CUDA, by design)",
            "gpus_per_trial=0.25": "needs a GPU (GPUs asked of a machine without one are refused, "
                                   "by design)"}
# how a command is changed to run here, and why
ADAPT = {
    "estimate=calibrate": ("estimate=off", "calibration trains every trial shape for 2 epochs "
                                           "(minutes on 2 cores); tests/test_estimate.py "
                                           "covers it"),
    "data.path=/data/TU": ("data.path={tmp}/TU", "the user's data folder, made here empty (TU is "
                                                 "fetched into it on first use)"),
}
# the exit code a command shows (docs/usage.md: verify on an empty store is intact but
# incomplete; docs/runner.md: examples of refused input, whose error line the doc quotes)
EXIT = {"verify=true": 4, "backbone=resnet": 2, "seed=range(0,30000)": 2}


def _read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def study_blocks() -> list[tuple[str, str]]:
    """(where, text) of every ```yaml block of README.md and docs/*.md that is a study file."""
    import yaml

    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for i, m in enumerate(re.finditer(r"^```ya?ml\n(.*?)^```", text, re.M | re.S)):
            data = yaml.safe_load(m.group(1))
            if isinstance(data, dict) and STUDY_SECTIONS & set(data):
                found.append((f"{path.relative_to(ROOT)}#{i}", m.group(1)))
    return found


def fenced(text: str) -> tuple[list[str], str]:
    """(lines of the fenced shell blocks, the prose outside every fence) of a Markdown text.

    Fences are read line by line (an opening fence names a language or none; the next fence
    closes it), so a closing fence never opens the next block; yaml and python blocks are
    prose-free and not shell. A line ending in a backslash goes on in the next one."""
    shell, prose, lang = [], [], None
    for line in text.splitlines():
        fence = re.match(r"^\s*```(\S*)", line)
        if fence:
            lang = fence.group(1) if lang is None else None
            continue
        if lang is None:
            prose.append(line)
        elif lang in ("", "bash", "sh", "console"):
            if shell and shell[-1].endswith("\\"):
                shell[-1] = shell[-1][:-1].rstrip() + " " + line.strip()
            else:
                shell.append(line)
    return shell, "\n".join(prose)


def command_lines() -> list[tuple[str, str]]:
    """(where, command) of every `python -m ablate.run` command with arguments in the docs:
    lines of fenced shell blocks (a console's `$ ` cut) and inline code spans, comments cut,
    one command of an && chain."""
    out: dict[str, str] = {}
    for name in COMMAND_DOCS:
        shell, prose = fenced(_read(name))
        pieces = shell + [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
        for line in pieces:
            line = re.sub(r"\s+#.*$", "", line.strip()).removeprefix("$ ")
            for part in line.split("&&"):
                part = part.strip()
                for q in "'\"":  # a quote opened before the command (ssh host '...') or
                    if part.count(q) % 2:  # closed after it: not the command's own
                        part = part.strip(q)
                if len(part) > 1 and part[0] == part[-1] and part[0] in "'\"":
                    part = part[1:-1]  # a whole command quoted in prose
                if ENTRY in part and part.split(ENTRY, 1)[1].strip():  # not the bare name
                    out.setdefault(part, name)
    return [(where, cmd) for cmd, where in out.items()]


def shell_lines() -> list[tuple[str, str]]:
    """(where, line) of every whole line of a fenced shell block, and every inline code span,
    that runs `python -m ablate.run` with arguments, as a user would paste it."""
    out: dict[str, str] = {}
    for name in COMMAND_DOCS:
        shell, prose = fenced(_read(name))
        pieces = shell + [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
        for line in pieces:
            line = line.strip().removeprefix("$ ")
            if line.startswith(("python", "RAY_", "ABLATE_")) or " && " in line or "ssh " in line:
                if ENTRY in line and line.split(ENTRY, 1)[1].strip():
                    out.setdefault(line, name)
    return [(where, line) for line, where in out.items()]


def quoted_errors() -> dict[str, str]:
    """command -> the error line a doc shows under it (a console example: `$ command`, then
    its output), which the command must print word for word."""
    out = {}
    for name in COMMAND_DOCS:
        for cmd, line in re.findall(r"^\s*\$ (python -m ablate\.run[^\n]*)\n\s*(error: [^\n]*)$",
                                    _read(name), re.M):
            out[cmd.strip()] = line.strip()
    return out


def doc_layer() -> str:
    """docs/usage.md's own dense layer (`# mylayers.py` block), which its commands name."""
    blocks = re.findall(r"^```python\n(# mylayers\.py.*?)^```", _read("docs/usage.md"), re.M | re.S)
    assert len(blocks) == 1, "docs/usage.md shows mylayers.py once"
    return blocks[0]


STUDIES = study_blocks()
COMMANDS = command_lines()
QUOTED = quoted_errors()


def test_the_docs_hold_the_examples_this_file_checks():
    assert any(w.startswith("docs/runner.md") for w, _ in STUDIES), STUDIES
    assert len(COMMANDS) >= 15, COMMANDS
    assert any("study=mnist dry_run=true" in c for _, c in COMMANDS)  # README: offline dry run
    assert len(QUOTED) >= 2 and set(QUOTED) <= {c for _, c in COMMANDS}, QUOTED
    assert {w for w, _ in COMMANDS} >= {"README.md", "docs/usage.md", "docs/runner.md",
                                        "docs/search.md", "docs/sdc.md", "docs/recipes.md"}


@pytest.mark.parametrize("where, text", STUDIES, ids=[w for w, _ in STUDIES])
def test_every_study_file_of_the_docs_dry_runs(where, text, tmp_path, monkeypatch, capsys):
    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "docs_example.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_STUDIES", str(studies))  # found by name, as a user's folder is
    code = main(["study=docs_example", "dry_run=true", "estimate=off",
                 f"results_dir={tmp_path / 'results'}"])
    captured = capsys.readouterr()
    assert code == 0, (where, captured.err)
    assert re.search(r"^\d+ trials \(0 done", captured.out, re.M), captured.out[-500:]


def _prepared(cmd: str, tmp_path: Path) -> tuple[list[str], int]:
    """The command's arguments as run here and the exit code expected; skips as `SKIP` says."""
    import torch

    for text, why in SKIP.items():
        if text in cmd:
            pytest.skip(why)
    for text, why in GPU_ONLY.items():
        if text in cmd and not torch.cuda.is_available():
            pytest.skip(why)
    for text, (instead, _why) in ADAPT.items():
        if text in cmd and "{tmp}" in instead:
            instead = instead.format(tmp=tmp_path)
            Path(instead.split("=", 1)[1]).mkdir(parents=True)
        cmd = cmd.replace(text, instead)
    words = shlex.split(cmd)
    assert words[:3] == ENTRY.split(), cmd  # nothing before the entry point (env assignments)
    args = words[3:]
    if any(a in ("--help", "-h") for a in args):
        return args, 0
    expected = next((c for text, c in EXIT.items() if text in cmd), 0)
    return [*args, "dry_run=true", f"results_dir={tmp_path / 'results'}"], expected


@pytest.mark.parametrize("where, cmd", COMMANDS, ids=[c.replace(ENTRY, "").strip() or c for _, c in COMMANDS])
def test_every_command_of_the_docs_dry_runs_offline(where, cmd, tmp_path, monkeypatch, capsys):
    args, expected = _prepared(cmd, tmp_path)
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # study=./my_study.yaml: the docs' own study file, here
    (tmp_path / "my_study.yaml").write_text(STUDIES[0][1], encoding="utf-8")
    (tmp_path / "mylayers.py").write_text(doc_layer(), encoding="utf-8")  # backbone=mylayers:..
    code = main(args)
    captured = capsys.readouterr()
    assert code == expected, (where, cmd, captured.err[-2000:])
    if cmd in QUOTED:  # the error line the doc quotes is the one printed
        assert captured.err.strip().splitlines()[-1] == QUOTED[cmd], (where, cmd)
    if "dry_run=true" in args and not expected and "threshold_search" not in cmd \
            and "tu_search" not in cmd:
        assert re.search(r"^\d+ trials \(", captured.out, re.M), captured.out[-500:]
    if "study=mnist" in cmd and "digits_sp" not in cmd:  # the download still to come, named
        assert "note: MNIST: 4 file(s) (11.6 MB) will be downloaded from" in captured.out


def test_the_readme_reading_example_says_which_studies_exist(tmp_path, monkeypatch):
    """Copied before any run, the README's Python block stops at `read_trials` with one line
    naming the studies that do have results."""
    from ablate.runner.execute.store import StoreError

    block = re.search(r"^```python\n(.*?)^```", _read("README.md"), re.M | re.S).group(1)
    assert "from ablate import read_trials" in block
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as e:
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    assert "'supervision'" in str(e.value) and "\n" not in str(e.value)
    assert "no study has results there yet" in str(e.value)


def test_the_readme_set_up_is_two_commands_that_make_a_virtual_environment_first():
    text = _read("README.md")
    section = text[text.index("## Set-up"):text.index("\n## ", text.index("## Set-up") + 3)]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 2 and all(len(b.strip().splitlines()) == 1 for b in blocks), blocks
    for b in blocks:
        assert b.startswith("python3 -m venv .venv && . .venv/bin/activate && bash install.sh")


SHELL = shell_lines()


@pytest.mark.parametrize("where, cmd", SHELL, ids=[c for _, c in SHELL])
def test_every_command_of_the_docs_is_valid_shell(where, cmd):
    """Copied into bash as written, a command parses (an unquoted ``seed=range(0,10)`` is a
    bash syntax error, which the Python-side dry run above cannot see)."""
    import subprocess

    done = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
    assert done.returncode == 0, (where, cmd, done.stderr)


def test_the_help_quotes_what_the_shell_would_read():
    """`--help` shows sweeps as they must be typed: an example with brackets is quoted."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    text = out.getvalue()
    assert "range(" in text
    assert not re.search(r"(?<!')\bseeds?=range\(", text), text
