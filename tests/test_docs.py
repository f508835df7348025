"""The documentation says what the code does: every command and option is in the reference,
every command a page runs exists with the options it is given, the generated pages are
current, every setting and variable is described, and the README stays short.

(The code blocks themselves run in tests/test_readme.py; `make docs` builds the site in
strict mode, which fails on a broken link or anchor.)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import click
import pytest
from scripts import docs_reference

from mnemex.cli import cli
from tests.test_readme import FENCE, PAGES, README, ROOT, SHELLS, page_name

REFERENCE = ROOT / "docs" / "reference" / "cli.md"
MAX_README_LINES = 300
# Words after which a shell command starts (mnemex then is the command, not an argument).
COMMAND_STARTS = {"|", "||", "&&", ";", "(", "$(", "`", "--", "xargs", "exec", "time", "command"}
INLINE = re.compile(r"(?<!`)`(mnemex [^`]+)`(?!`)")


# -- the click tree, walked here apart from the generator ------------------------------------


def tree(
    command: click.Command = cli, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], click.Command]:
    """Every visible command by its path (the root is ``()``)."""
    found = {path: command}
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                found |= tree(sub, (*path, name))
    return found


def visible_flags(command: click.Command) -> list[str]:
    return [
        flag
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for flag in param.opts + param.secondary_opts
    ] + ["--help"]


def reference_sections() -> dict[tuple[str, ...], str]:
    """The text of each ``## mnemex ...`` section of the command reference, by command path."""
    text = REFERENCE.read_text(encoding="utf-8")
    parts = re.split(r"^## (mnemex(?: [\w-]+)*)\n", text, flags=re.M)
    return {
        tuple(name.split()[1:]): body for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def test_every_command_and_option_is_in_the_reference() -> None:
    sections = reference_sections()
    for path, command in tree().items():
        name = " ".join(("mnemex", *path))
        assert path in sections, f"{name} is not in docs/reference/cli.md: make docs-reference"
        for flag in visible_flags(command):
            assert re.search(rf"`[^`]*(?<![\w-]){re.escape(flag)}\b", sections[path]), (
                f"{name} {flag} is not in docs/reference/cli.md: make docs-reference"
            )
    assert set(sections) == set(tree()), set(sections) ^ set(tree())


def test_the_generated_pages_are_current() -> None:
    for page, make in docs_reference.PAGES.items():
        assert page.read_text(encoding="utf-8") == make(), (
            f"{page.relative_to(ROOT)} is stale: run make docs-reference (scripts/docs_reference.py)"
        )


# -- every command the pages name exists -----------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    where: str
    args: tuple[str, ...]
    whole: bool = True  # a command line to run (its arguments all given), not a name in prose


def shell_words(code: str) -> list[str]:
    """The words and operators of a shell script, comments dropped, continuations joined, a
    line's end read as ``;``; a line whose quotes do not close (a here-document's) is left out."""
    words = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()`")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words += [*lexer, ";"]
        except ValueError:
            continue
    return words


def invocations_in(code: str, where: str) -> list[Invocation]:
    words = shell_words(code)
    found = []
    for i, word in enumerate(words):
        if word != "mnemex" and not word.endswith("/mnemex"):
            continue
        before = words[i - 1] if i else "|"
        if before not in COMMAND_STARTS and not before.endswith("$") and "=" not in before:
            continue  # an argument (claude mcp add mnemex ...), not the command
        args = []
        for arg in words[i + 1 :]:
            if arg in COMMAND_STARTS - {"--"} or set(arg) <= set(";&|()`"):
                break
            args.append(arg)
        found.append(Invocation(where, tuple(args), whole=before != "xargs"))
    return found


def documented_invocations() -> list[Invocation]:
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1).lower() in SHELLS:
                line = text.count("\n", 0, match.start()) + 1
                found += invocations_in(match.group(2), f"{page_name(path)}:{line}")
        prose = FENCE.sub("", text)
        for match in INLINE.finditer(prose):
            words = shlex.split(match.group(1).replace("...", ""), comments=False)
            span = f"{page_name(path)} `{match.group(1)}`"
            found.append(Invocation(span, tuple(words[1:]), whole=False))
    return found


def option_named(command: click.Command, flag: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and flag in param.opts + param.secondary_opts:
            return param
    return None


def problem(invocation: Invocation) -> str | None:
    """What is wrong with a documented command line, if anything."""
    command: click.Command = cli
    path = ["mnemex"]
    args = list(invocation.args)
    given = 0  # arguments given to the command reached
    while args:
        arg = args.pop(0)
        if arg.startswith("-") and arg != "-":
            flag = arg.split("=", 1)[0]
            if flag in ("--help", "-h"):
                continue
            option = option_named(command, flag)
            if option is None:
                return f"{' '.join(path)} has no option {flag}"
            if not option.is_flag and not option.count and "=" not in arg and args:
                args.pop(0)  # its value
        elif not isinstance(command, click.Group):
            given += 1
        else:
            if re.fullmatch(r"[A-Z_.]+", arg):
                return None  # a placeholder (COMMAND): nothing more to check
            sub = command.get_command(click.Context(command), arg)
            if sub is None:
                return f"{' '.join(path)} has no command {arg!r}"
            command, path = sub, [*path, arg]
    needed = [p for p in command.params if isinstance(p, click.Argument) and p.required]
    if not invocation.whole:
        return None
    if isinstance(command, click.Group) and len(path) > 1:
        return f"{' '.join(path)} needs a command"
    if given < len(needed):
        return f"{' '.join(path)} needs {needed[given].human_readable_name}"
    return None


def test_every_command_the_docs_name_exists() -> None:
    invocations = documented_invocations()
    assert len(invocations) > 150, len(invocations)  # the parser finds the pages' commands
    named = {inv.args[0] for inv in invocations if inv.args and not inv.args[0].startswith("-")}
    assert {"search", "hooks", "mcp", "sync", "migrate", "eval"} <= named
    wrong = [f"{inv.where}: {p}" for inv in invocations if (p := problem(inv))]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("line", "wrong"),
    [
        ("mnemex hooks install --project", "mnemex hooks install needs AGENT"),
        (
            "mnemex hooks install codex --everywhere",
            "mnemex hooks install has no option --everywhere",
        ),
        ("mnemex serch deploys", "mnemex has no command 'serch'"),
        ("echo x | mnemex -n ns add - --kinds gotcha", "mnemex add has no option --kinds"),
        (
            "claude mcp add mnemex -- mnemex --namespace x mcp --chek",
            "mnemex mcp has no option --chek",
        ),
        (
            "relation=$(mnemex relate A likes B --confident 1)",
            "mnemex relate has no option --confident",
        ),
    ],
)
def test_a_wrong_command_is_caught(line: str, wrong: str) -> None:
    (invocation,) = invocations_in(line, "example")
    assert problem(invocation) == wrong


def test_right_commands_pass() -> None:
    code = """mnemex --db x.db search "q" --fusion rrf --weights 0.7,0.3 --json  # a comment --nope
    claude mcp add mnemex -- mnemex --namespace ledgerly mcp
    mnemex sync ~/agent --glob 'MEMORY.md,notes/**/*.md' \\
      --remove
    .venv/bin/mnemex hook --agent claude-code --no-serve"""
    found = invocations_in(code, "example")
    assert [inv.args[:1] for inv in found] == [("--db",), ("--namespace",), ("sync",), ("hook",)]
    assert [problem(inv) for inv in found] == [None] * 4


# -- settings, variables, install lines, length ----------------------------------------------


def test_every_setting_is_described_once() -> None:
    described = [name for section in docs_reference.SETTINGS.values() for name in section]
    assert len(described) == len(set(described))
    assert set(described) == set(docs_reference.settings_fields())
    assert set(docs_reference.CHOICES) <= set(described)
    for name, choices in docs_reference.CHOICES.items():
        field = docs_reference.settings_fields()[name]
        assert field.default in choices, name


def test_every_variable_the_code_reads_is_in_the_configuration_page() -> None:
    page = docs_reference.CONFIG_PAGE.read_text(encoding="utf-8")
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))
    named = set(re.findall(r"\bMNEMEX_[A-Z_]*[A-Z]\b", source))
    settings = {docs_reference.variable(name) for name in docs_reference.settings_fields()}
    assert named - settings <= set(docs_reference.OTHER_VARIABLES), named - settings
    assert "MNEMEX_HOME" in named and "MNEMEX_NAMESPACE" in settings
    for variable in settings | set(docs_reference.OTHER_VARIABLES):
        assert f"`{variable}`" in page, variable


def test_the_install_lines_are_the_ones_ci_runs() -> None:
    """Each line that installs from a clone, as the README and the install page write it,
    is run as written by scripts/check_dist.sh (make dist-check, in CI)."""
    script = (ROOT / "scripts" / "check_dist.sh").read_text(encoding="utf-8").replace('\\"', '"')
    lines = []
    for path in (README, ROOT / "docs" / "install.md"):
        for match in FENCE.finditer(path.read_text(encoding="utf-8")):
            for line in match.group(2).splitlines():
                command = line.split("#", 1)[0].strip()
                if re.match(
                    r"(pipx install|uv tool install|pip install) \"\.\[embed,mcp\]", command
                ):
                    lines.append(command)
    assert {line.split(' "')[0] for line in lines} == {
        "pipx install",
        "uv tool install",
        "pip install",
    }
    missing = [line for line in lines if line not in script]
    assert not missing, missing


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; the rest belongs in docs/"
