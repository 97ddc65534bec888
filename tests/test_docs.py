"""The docs: the README stays the front page, the generated references list everything, and every
command marked as runnable in the docs runs.

A fenced ``bash`` block right after a line ``<!-- test: run -->`` (or ``<!-- test: run
expect="text" -->``) in README.md or docs/**/*.md is run by :func:`test_doc_command_runs`: the
whole block as one ``bash -euo pipefail`` script in an empty folder (with ``datasets/`` of the
checkout linked in and ``rag-exp`` on the PATH, this checkout's code), and must exit 0 and print
``text``. Mark only blocks that run offline with the fakes or the bundled models and need no
server; docs/development.md says so for authors.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MARKER = re.compile(r'^<!-- test: run(?: expect="(?P<expect>[^"]*)")? -->$')
SETUP_BLOCK = """```bash
make run     # creates .venv, installs what the main job needs, evaluates the bundled sample
make test    # adds the test tools and extras, then the fast test loop (`make test-all`: all)
```"""
"""The two set-up commands: the contract with new users and CI, kept verbatim in the README."""


def _doc_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


@dataclasses.dataclass(frozen=True)
class Block:
    where: str
    """``file:line`` of the marker, the file relative to the checkout."""
    code: str
    expect: str


def marked_blocks(paths: list[Path], root: Path = ROOT) -> list[Block]:
    """Every ``bash`` block marked ``<!-- test: run … -->`` in ``paths``.

    Raises:
        ValueError: A ``<!-- test:`` line that does not match :data:`MARKER`, or one not
            followed by a fenced ``bash`` block (names the file and line).
    """
    blocks = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("<!-- test:"):
                continue
            where = f"{path.relative_to(root)}:{i + 1}"
            found = MARKER.match(line)
            if not found:
                raise ValueError(
                    f'{where}: write <!-- test: run --> or <!-- test: run expect="…" -->'
                )
            if i + 1 >= len(lines) or lines[i + 1].strip() != "```bash":
                raise ValueError(f"{where}: the marker must be followed by a ```bash block")
            end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{where}: the bash block is not closed")
            code = "\n".join(lines[i + 2 : end])
            blocks.append(Block(where, code, found.group("expect") or ""))
    return blocks


def test_marker_parsing_finds_blocks_and_refuses_bad_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        'text\n<!-- test: run expect="hello" -->\n```bash\necho hello\necho there\n```\n'
        "<!-- test: run -->\n```bash\ntrue\n```\n```bash\nnot marked\n```\n",
        encoding="utf-8",
    )
    got = marked_blocks([page], root=tmp_path)
    assert got == [
        Block("page.md:2", "echo hello\necho there", "hello"),
        Block("page.md:7", "true", ""),
    ]
    page.write_text("<!-- test: run -->\n```python\nx\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="page.md:1: the marker must be followed"):
        marked_blocks([page], root=tmp_path)
    page.write_text("<!-- test: runs -->\n```bash\nx\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="page.md:1: write"):
        marked_blocks([page], root=tmp_path)


def test_readme_is_the_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert SETUP_BLOCK in text, "the README must keep the two set-up commands verbatim"
    assert len(text.splitlines()) <= 300
    assert "docs/run_page.png" in text and "docs/traces.png" in text
    # the README's marked blocks: the tour's runnable steps
    assert len(marked_blocks([README])) >= 3


def _relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    return [link for link in links if not re.match(r"^(https?:|mailto:|#)", link)]


def test_readme_links_point_to_existing_files() -> None:
    """The site's own links are checked by `mkdocs build --strict`; the README is outside it."""
    missing = [
        link
        for link in _relative_links(README)
        if not (README.parent / link.split("#")[0]).exists()
    ]
    assert missing == []
    assert len(_relative_links(README)) > 20


def test_docs_links_point_to_existing_files() -> None:
    """Links between the docs pages also work on GitHub, where the site is not built: the
    generated references have committed placeholders."""
    missing = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in sorted(DOCS.rglob("*.md"))
        for link in _relative_links(page)
        if not (page.parent / link.split("#")[0]).exists()
    ]
    assert missing == []


# --- generated references --------------------------------------------------------------------
def _gen_ref():
    spec = importlib.util.spec_from_file_location("gen_ref", DOCS / "gen_ref.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_build_replaces_the_reference_placeholders(monkeypatch: pytest.MonkeyPatch) -> None:
    from mkdocs.config import load_config
    from mkdocs.structure.files import File, Files

    gen = _gen_ref()
    uris = [gen.CONFIG_PAGE, gen.CLI_PAGE]
    for uri in uris:
        assert "docs/gen_ref.py replaces it" in (DOCS / uri).read_text(encoding="utf-8")
    config = load_config(str(ROOT / "mkdocs.yml"))
    # set by mkdocs while it runs an event; read by File.generated
    monkeypatch.setattr(config.plugins, "_current_plugin", None, raising=False)
    files = Files([File(uri, str(DOCS), config["site_dir"], False) for uri in uris])
    monkeypatch.setattr(gen, "pages", lambda: {uri: f"# generated {uri}\n" for uri in uris})
    out = gen.on_files(files, config)
    assert [f.content_string for f in out] == [f"# generated {uri}\n" for uri in uris]


def test_reference_cells_render_sphinx_roles_as_code() -> None:
    cell = _gen_ref()._cell
    text = "Arguments of :class:`~rag_experiments.lifecycle.launchers.RayLauncher` (:mod:`a.b`)"
    assert cell(text) == "Arguments of `RayLauncher` (`a.b`)"
    assert cell(":py:func:`x.y` | ``z``") == "`x.y` \\| `z`"


def test_the_starter_files_in_the_bundled_conf_are_not_options(tmp_path: Path) -> None:
    from rag_experiments.starter import TEMPLATES, overlay_files

    gen = _gen_ref()
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("a: 1\n")
    rel = Path("experiment/starter.yaml")
    assert rel in overlay_files()
    (tmp_path / rel).write_bytes((TEMPLATES / rel).read_bytes())  # an old `rag-exp init` copy
    skip = gen._starter_files(tmp_path)
    assert skip == {rel}
    assert gen.config_options(tmp_path, skip) == {"experiment": ["mine"]}
    assert gen.config_options(tmp_path) == {"experiment": ["mine", "starter"]}


def _sections(page: str) -> dict[str, str]:
    """``{heading text: body}`` of every ``##``/``###`` heading."""
    parts = re.split(r"^(#{2,3} .*)$", page, flags=re.M)
    return {parts[i].lstrip("#").strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _schema_keys(schema: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(schema):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            keys += _schema_keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


@pytest.mark.slow
def test_config_reference_lists_every_group_option_and_key() -> None:
    from rag_experiments.config import schema as schema_module

    page = _gen_ref().config_reference()
    sections = _sections(page)
    conf = ROOT / "conf"
    options = [
        p.relative_to(conf) for p in conf.rglob("*.yaml") if len(p.relative_to(conf).parts) > 1
    ]
    assert len(options) > 40
    headings = " ".join(sections)
    groups = {p.name for p in conf.iterdir() if p.is_dir()} | {"experiment"}
    for rel in options:
        group, option = "/".join(rel.parts[:-1]), rel.stem
        assert f"`{group}={option}`" in headings, rel
    for group, nodes in _gen_ref().store_options().items():  # our plugins' stored options
        for option in nodes:
            assert f"`{group}={option}`" in headings, (group, option)
    for primary in [p.stem for p in conf.glob("*.yaml") if p.stem != "config"]:
        assert f"(`conf/{primary}.yaml`)" in headings, primary
    # every field of every schema a section names is a row of that section
    checked = 0
    for heading, body in sections.items():
        named = re.search(r"Schema `([\w.]+)\.(\w+)`", body)
        if not named:
            continue
        schema = getattr(importlib.import_module(named.group(1)), named.group(2))
        option = re.match(r"`([\w/]+)=", heading)
        prefix = option.group(1).replace("/", ".") + "." if option else ""
        rows = re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)
        for key in _schema_keys(schema):
            if not option and key.split(".")[0] in groups:
                continue  # a primary config's groups: their options have their own sections
            full = prefix + key
            assert any(r == full or r.startswith(full + ".") for r in rows), (heading, full)
            checked += 1
    assert checked > 200
    # every root field: RootConf's keys beside the groups
    assert "`max_samples`" in sections["Run-wide keys (`conf/config.yaml`)"]
    assert schema_module.RootConf.__name__ in page


def _help_text(argv: list[str]) -> str:
    from rag_experiments import cli

    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.COMMANDS[argv[0]].run(argv[1:])
    return out.getvalue()


@pytest.mark.slow
def test_cli_reference_lists_every_command_and_option() -> None:
    from hydra._internal.utils import get_args_parser

    from rag_experiments import cli

    page = _gen_ref().cli_reference()
    sections = _sections(page)
    hydra_flags = [s for a in get_args_parser()._actions for s in a.option_strings]
    sub_commands = []
    for name in cli.COMMANDS:
        body = sections[f"`rag-exp {name}` {{ #rag-exp-{name} }}"]
        if name in ("run", "generate"):  # Hydra apps: `--help` is the app's config help
            expected = hydra_flags
        else:
            help_text = _help_text([name, "--help"])
            expected = re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", help_text.split("\n\n", 1)[-1])
            usage = " ".join(help_text.split("\n\n", 1)[0].split())
            has_subs = (
                re.search(r"(?<!\[)\b\w+ \.\.\.$", usage) is not None
            )  # `cmd [-h] action ...`
            subs = re.findall(r"^    ([a-z][\w-]*)\s{2,}\S", help_text, flags=re.M)
            assert subs or not has_subs, (name, "sub-commands not found in --help")
            for action in subs if has_subs else []:
                sub_commands.append(f"{name} {action}")
                sub_help = _help_text([name, action, "--help"])
                sub_body = page.split(f"`rag-exp {name} {action}`", 1)[1]
                for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", sub_help):
                    assert f"`{flag}`" in sub_body or flag in ("-h", "--help"), (name, action, flag)
        for flag in expected:
            if flag in ("-h", "--help") and name not in ("run", "generate"):
                continue
            assert f"`{flag}`" in body, (name, flag)
    assert sub_commands == ["dataset stats", "dataset report"]


# --- commands shown in the docs --------------------------------------------------------------
BLOCKS = marked_blocks(_doc_files())


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_doc_command_runs(block: Block, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "rag-exp"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rag_experiments "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "datasets").symlink_to(ROOT / "datasets")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{output[-3000:]}"
    assert block.expect in output, f"{block.where}: {block.expect!r} not printed:\n{output[-3000:]}"
