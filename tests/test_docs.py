"""The README and every page under docs/ show only commands, flags, paths and links that exist.

What a page shows is read from its code: fenced blocks (one command a line, ``\\`` joining
lines) and inline code spans (table cells included).

- ``python -m infra ...`` / ``python -m workloads ...``: every word up to the first flag or
  argument must name a command or group of that CLI, and every flag shown (``--x``, ``-x``)
  must be an option of the command it is shown with. The commands and options are read from
  the CLI's own click command tree, the one ``--help`` prints from, never from a list kept
  here. A span that starts with a top-level command's name (`submit --dry-run`, `pools
  status`) is read as that command of the CLI that has it.
- ``python -m <a module of this repository>`` and ``scripts/<file>``: a flag shown must
  appear in that file (or, for a shell script, in the Python program of the same name it
  hands over to).
- A repository path (``infra/catalog.py``, ``scripts/test``, ``tests/bad_specs/``; ``<x>``
  and ``*`` are wildcards) must exist; a path under a package (``render/literal.py``) must
  end some file of the repository. A dotted name of the repository's modules
  (``workloads.runs.identity``) must name a module, or a name its package defines.
- A link to a page or a heading (``[x](capacity.md#teams)``) must resolve.
- No reference to something a reader cannot open ("seed 003", "issue 22", "stop 18").
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer.main

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLIS = ("infra", "workloads")
PACKAGES = ("infra", "workloads", "toolkit", "modules")
# Where a path's first segment is one of these, it is a path of this repository.
TOP = frozenset({"infra", "workloads", "toolkit", "modules", "tests", "scripts", "cloudbuild", "tools", "examples", "docs", ".ci"})
FILE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".md", ".json", ".cjs", ".txt", ".toml", ".cfg")

# A flag shown alone (`--set`) is one of the CLIs' options, or one of these: flags of another
# program a page talks about, by their program (not checkable here), and flags of the
# repository's other programs, by their file (each must appear in it).
OTHER_PROGRAMS = {
    "xpk and Cluster Toolkit, in tpu-recipes scripts": {
        "--command",
        "--compute-type",
        "--topology",
        "--device-type",
        "--tpu-type",
        "--num-slices",
        "--docker-image",
        "--output-manifest-file",
        "--env",
        "--storage",
        "--mount",
        "--gke-mtc-enabled",
        "--placement-policy",
        "--node-constraint",
        "--base-image",
    },
    "MaxText's benchmark runner": {"--model_name", "--num_steps", "--device_type", "--num_slices"},
    "libtpu": {"--megascale_grpc_interface_prefixes"},
    "gcsfuse": {"--only-dir"},
    "pytest": {"--dist"},
}
REPO_PROGRAMS = {
    "scripts/bench_everyday.py": {"--compare", "--xpk"},
    "scripts/bench_import_recipes.py": {"--toolkit"},
    "scripts/bench_synth.py": {"--fleet", "--samples", "--repo", "--sizes"},
    "workloads/ray/jax_trainer.py": {"--accelerator-type", "--num-workers", "--cpu"},
    "workloads/ray/entrypoint.py": {"--maxtext-args-b64"},
}


# ---- the CLIs, read from their click command trees


@dataclass
class Command:
    path: tuple[str, ...]
    options: frozenset[str]
    commands: dict[str, Command] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "python -m " + " ".join(self.path)


def _command(click_cmd, path: tuple[str, ...]) -> Command:
    options = {"--help"}
    for p in click_cmd.params:
        if p.param_type_name == "option":
            options.update(p.opts)
            options.update(p.secondary_opts)
    cmd = Command(path, frozenset(options))
    for name, sub in getattr(click_cmd, "commands", {}).items():
        cmd.commands[name] = _command(sub, (*path, name))
    return cmd


@functools.cache
def cli(module: str) -> Command:
    """``python -m <module>``'s command tree: every command registered, as ``--help`` sees it."""
    mod = importlib.import_module(f"{module}.cli")
    if hasattr(mod, "_register"):
        mod._register(None)  # workloads imports its command modules lazily; None loads them all
    return _command(typer.main.get_command(mod.app), (module,))


@functools.cache
def top_commands() -> dict[str, str]:
    """A top-level command's name -> the CLI that has it."""
    out: dict[str, str] = {}
    for module in CLIS:
        for name in cli(module).commands:
            assert name not in out, f"{name} is a command of both CLIs: a bare `{name} ...` in a doc would be ambiguous"
            out[name] = module
    return out


def all_flags() -> set[str]:
    found: set[str] = set()

    def walk(c: Command) -> None:
        found.update(c.options)
        for sub in c.commands.values():
            walk(sub)

    for module in CLIS:
        walk(cli(module))
    return found


# ---- reading a page


@dataclass
class Snippet:
    line: int
    text: str
    block: bool  # a line of a fenced block, else an inline code span


FENCE = re.compile(r"^\s*```")
SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def snippets(text: str) -> list[Snippet]:
    out: list[Snippet] = []
    lines = text.splitlines()
    prose: list[tuple[int, str]] = []
    in_block = False
    pending = ""
    for n, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_block = not in_block
            prose.append((n, ""))
            continue
        if in_block:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            out.append(Snippet(n, pending + line, True))
            pending = ""
            prose.append((n, ""))
        else:
            prose.append((n, line))
    # Spans may run over a line break; table cells escape | as \|.
    joined = "\n".join(line for _, line in prose)
    for m in SPAN.finditer(joined):
        n = joined.count("\n", 0, m.start()) + 1
        out.append(Snippet(n, m.group(2).replace("\n", " ").replace("\\|", "|").strip(), False))
    return out


def prose_without_code(text: str) -> str:
    kept, in_block = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_block = not in_block
            continue
        if not in_block:
            kept.append(SPAN.sub("", line))
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"`|\*\*?|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(text: str) -> set[str]:
    out, seen, in_block = set(), {}, False
    for line in text.splitlines():
        if FENCE.match(line):
            in_block = not in_block
        elif not in_block and (m := re.match(r"#{1,6}\s+(.*)", line)):
            s = slug(m.group(1))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
    return out


# ---- the checks


SEPARATOR = re.compile(r"\s(?:#|;|&&|>|2>)\s|\s(?:#|>)$")
FLAG = re.compile(r"^(--?[A-Za-z][\w-]*)")
INVOCATION = re.compile(r"(?:^|(?<=[\s(]))(?:\S*/)?python3?\s+-m\s+([\w.]+)")


@dataclass
class Stats:
    commands: int = 0
    flags: int = 0
    paths: int = 0
    modules: int = 0
    links: int = 0


def _cut(rest: str) -> str:
    """A command's own words: up to a comment, redirection or the next shell command (a | inside [...] is an alternative)."""
    m = SEPARATOR.search(rest)
    if m:
        rest = rest[: m.start()]
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "["
        depth -= ch == "]"
        if depth == 0 and rest.startswith(" | ", i):
            return rest[:i]
    return rest


def _words(rest: str) -> list[str]:
    return [w for w in (w.strip("[](),'\"") for w in rest.split()) if w]


def _flags(words: list[str], *, short: bool) -> list[str]:
    found = []
    for w in words:
        for piece in w.split("/"):
            m = FLAG.match(piece.split("=", 1)[0])
            if m and (m.group(1).startswith("--") or (short and len(m.group(1)) == 2)):
                found.append(m.group(1))
    return found


def _check_cli(module: str, rest: str, where: str, problems: list[str], stats: Stats) -> None:
    node = cli(module)
    words = _words(_cut(rest))
    i = 0
    while i < len(words) and node.commands and not words[i].startswith("-"):
        w = words[i]
        if w in node.commands:
            node = node.commands[w]
            i += 1
            continue
        if re.fullmatch(r"[a-z][a-z0-9-]*", w) and w not in {"...", "…"}:
            problems.append(f"{where}: `{node.name} {w}`: no such command (has: {', '.join(node.commands)})")
            return
        break  # a placeholder such as RECIPE, <run>, ...
    stats.commands += 1
    for flag in _flags(words[i:], short=True):
        stats.flags += 1
        if flag not in node.options:
            problems.append(f"{where}: `{node.name}` has no option {flag} (it has {', '.join(sorted(node.options))})")


def _check_file_flags(path: Path, rest: str, where: str, problems: list[str], stats: Stats) -> None:
    texts = [path.read_text(encoding="utf-8")]
    handover = path.with_name(path.stem.replace("-", "_") + ".py")
    if path.suffix == ".sh" and handover.exists():
        texts.append(handover.read_text(encoding="utf-8"))
    stats.commands += 1
    for flag in _flags(_words(_cut(rest)), short=False):
        stats.flags += 1
        if not any(flag in t for t in texts):
            problems.append(f"{where}: {path.relative_to(REPO)} does not take {flag} (not in its source)")


def _check_bare_flags(text: str, where: str, problems: list[str], stats: Stats) -> None:
    known = all_flags()
    for flag in _flags(_words(_cut(text)), short=True):
        stats.flags += 1
        if flag in known or any(flag in flags for flags in OTHER_PROGRAMS.values()):
            continue
        owner = next((f for f, flags in REPO_PROGRAMS.items() if flag in flags), None)
        if owner is None:
            problems.append(f"{where}: {flag} is no option of python -m infra or python -m workloads (another program's? add it to OTHER_PROGRAMS)")
        elif flag not in (REPO / owner).read_text(encoding="utf-8"):
            problems.append(f"{where}: {owner} does not take {flag} (not in its source)")


def _module_file(dotted: str) -> Path | None:
    p = REPO.joinpath(*dotted.split("."))
    for candidate in (p.with_suffix(".py"), p / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _check_dotted(name: str, where: str, problems: list[str], stats: Stats) -> None:
    """``infra.spec.load_spec``: modules as far as they go, then one name the last module or package defines."""
    parts = name.split(".")
    found = parts[0]
    for i in range(1, len(parts)):
        candidate = ".".join(parts[: i + 1])
        f = _module_file(candidate)
        if f is not None:
            found = candidate
            if f.name != "__init__.py":
                return  # a module: what follows is an attribute of it
            continue
        owner = _module_file(found)
        if owner is None or not re.search(rf"\b{re.escape(parts[i])}\b", owner.read_text(encoding="utf-8")):
            problems.append(f"{where}: `{name}`: {found} has no module or name {parts[i]!r}")
        return


@functools.cache
def _repo_files() -> tuple[str, ...]:
    skip = {".venv", "cdktn.out", "__pycache__", ".git", ".pytest_cache", ".ruff_cache", ".hypothesis"}
    return tuple(p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if p.is_file() and not skip & set(p.relative_to(REPO).parts))


@functools.cache
def _package_dirs() -> frozenset[str]:
    return frozenset(d for f in _repo_files() for d in f.split("/")[:-1])


def _check_path(token: str, where: str, problems: list[str], stats: Stats) -> None:
    t = token.lstrip("('\"`").rstrip(".,;:)'\"`").removeprefix("./")
    t = re.sub(r"(\.(?:py|sh|yaml|json|md)):\S*$", r"\1", t)  # file.py:function
    if "/" not in t or t.startswith(("/", "~", "$", "-")) or "://" in t or "#" in t:
        return
    first = t.split("/", 1)[0]
    wild = "<" in t or "*" in t or "…" in t
    if first in TOP:
        stats.paths += 1
        if wild:
            pattern = re.sub(r"<[^>]*>|…", "*", t)
            if not any(REPO.glob(pattern.rstrip("/"))):
                problems.append(f"{where}: no file of the repository matches {t}")
        elif not (REPO / t).exists() or (t.endswith("/") and not (REPO / t).is_dir()):
            problems.append(f"{where}: {t} does not exist")
    elif first in _package_dirs() and t.endswith(FILE_SUFFIXES) and not wild:
        stats.paths += 1
        if not any(f == t or f.endswith("/" + t) for f in _repo_files()):
            problems.append(f"{where}: no file of the repository ends with {t}")


def check(doc: str, text: str, base: Path = REPO) -> tuple[list[str], Stats]:
    """What is wrong with one page (its name for messages, its text, the directory its links start from)."""
    problems: list[str] = []
    stats = Stats()
    bare = top_commands()
    for s in snippets(text):
        where = f"{doc}:{s.line}"
        invocations = list(INVOCATION.finditer(s.text))
        for k, m in enumerate(invocations):
            module = m.group(1)
            end = invocations[k + 1].start() if k + 1 < len(invocations) else len(s.text)
            rest = s.text[m.end() : end]
            if module in CLIS:
                _check_cli(module, rest, where, problems, stats)
            elif module.split(".")[0] in PACKAGES:
                f = _module_file(module)
                if f is None:
                    problems.append(f"{where}: python -m {module}: no such module")
                else:
                    _check_file_flags(f, rest, where, problems, stats)
        if not invocations and not s.block:
            words = s.text.split()
            if words and words[0] in bare:
                _check_cli(bare[words[0]], s.text, where, problems, stats)
            elif words and words[0].startswith("-"):
                _check_bare_flags(s.text, where, problems, stats)
        for m in re.finditer(r"(?:^|(?<=\s))(?:\./|bash )?(scripts/[\w.-]+)(.*)", s.text):
            f = REPO / m.group(1)
            if f.is_file():
                _check_file_flags(f, m.group(2), where, problems, stats)
        for token in re.split(r"[\s,;()\[\]{}'\"=]+", s.text):
            _check_path(token, where, problems, stats)
        for m in re.finditer(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)", s.text):
            stats.modules += 1
            _check_dotted(m.group(1), where, problems, stats)
    for n, line in enumerate(text.splitlines(), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            stats.links += 1
            file_part, _, anchor = target.partition("#")
            path = (base / file_part).resolve() if file_part else None
            if path is not None and not path.exists():
                problems.append(f"{doc}:{n}: link to {file_part}, which does not exist")
            elif anchor and anchor not in anchors(path.read_text(encoding="utf-8") if path else text):
                problems.append(f"{doc}:{n}: link to #{anchor}: no such heading in {file_part or doc}")
    for m in re.finditer(r"\b(seed|issue|stop)s? \d+\b", prose_without_code(text), re.I):
        problems.append(f"{doc}: {m.group(0)!r} names something a reader cannot open: say the fact itself, or give a file or a public URL")
    return problems, stats


@pytest.mark.parametrize("page", DOCS, ids=[p.relative_to(REPO).as_posix() for p in DOCS])
def test_every_command_flag_path_and_link_a_page_shows_exists(page: Path) -> None:
    problems, stats = check(page.relative_to(REPO).as_posix(), page.read_text(encoding="utf-8"), page.parent)
    assert problems == [], "\n".join(problems)
    if page.name != "architecture.md":
        assert stats.commands > 0, f"{page.name} shows no command: is the parser still reading it?"


def test_every_page_is_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in DOCS[1:] if f"(docs/{p.name})" not in readme]
    assert missing == [], f"the README's 'Where to read next' does not link {missing}"


def test_the_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move the detail to a page under docs/"


def test_the_command_tree_is_what_help_prints() -> None:
    # The options checked above are those --help lists (hidden ones aside, which a page may still name).
    from typer.testing import CliRunner

    mod = importlib.import_module("workloads.cli")
    mod._register(None)
    result = CliRunner().invoke(mod.app, ["submit", "--help"], prog_name="python -m workloads")
    assert result.exit_code == 0, result.output
    for flag in ("--slices", "--checkpoint-every", "--dry-run", "--multi-tier-checkpointing"):
        assert flag in cli("workloads").commands["submit"].options and flag in result.output


BAD_PAGE = """# A page with mistakes

```bash
python -m workloads submit maxtext-6b --slices 2 --no-such-flag
python -m infra frobnicate --spec x.yaml
python -m workloads local up --fleet F    # fine
scripts/bench_fleet.py --made-up-option
```

Run `submit --dry-rnu` or `--checkpoint-evry`, read `infra/no_such_module.py`, `./scripts/no-such-script`,
`.ci/no-such-entry` and `render/no_such_renderer.py`, see
`tests/bad_specs/<nothing>.json` and `workloads.runs.no_such_name`. As seed 003 said.
See [teams](capacity.md#no-such-heading) and [gone](no-such-page.md).
"""


def test_a_made_up_command_flag_path_or_link_is_caught() -> None:
    problems, _ = check("bad.md", BAD_PAGE, REPO / "docs")
    text = "\n".join(problems)
    for expected in (
        "has no option --no-such-flag",
        "`python -m infra frobnicate`: no such command",
        "bench_fleet.py does not take --made-up-option",
        "has no option --dry-rnu",
        "--checkpoint-evry is no option of python -m infra or python -m workloads",
        "infra/no_such_module.py does not exist",
        "scripts/no-such-script does not exist",
        ".ci/no-such-entry does not exist",
        "no file of the repository ends with render/no_such_renderer.py",
        "no file of the repository matches tests/bad_specs/<nothing>.json",
        "workloads.runs has no module or name 'no_such_name'",
        "'seed 003' names something a reader cannot open",
        "link to #no-such-heading: no such heading in capacity.md",
        "link to no-such-page.md, which does not exist",
    ):
        assert expected in text, f"not caught: {expected}\n{text}"
    assert "--fleet" not in text, text
    assert len(problems) == 14, text
