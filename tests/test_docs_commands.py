"""Every flag of every `livethink ...` command in README.md and docs/*.md is one its `--help` lists, spelled as
`--help` spells it first, with dashes (code blocks, with their continuation lines, and inline code spans)."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from livethink.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`(livethink [^`]+)`(?!`)")
# flags of things that do not exist on purpose: docs/length_rl.md shows how a new variant would add its options
EXAMPLES = {("length_rl.md", "--short-bonus-tokens")}


def documented_commands() -> list[tuple[str, list[str]]]:
    """``(where, tokens)`` of each `livethink ...` command in the docs, tokens from ``livethink``'s command on."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        snippets = []
        for block in FENCE.finditer(text):
            line_no = text.count("\n", 0, block.start()) + 1
            body = block.group(1).replace("\\\n", " ")
            snippets += [(f"{doc.name}:{line_no}", line) for line in body.splitlines()]
        for span in INLINE.finditer(text):
            snippets.append((f"{doc.name}:{text.count(chr(10), 0, span.start()) + 1}", span.group(1)))
        for where, snippet in snippets:
            for part in re.split(r"&&|\|\||;|\|", snippet):
                part = re.sub(r"(^|\s)#.*$", "", part).strip().removeprefix("$ ")
                if not part.startswith("livethink "):
                    continue
                try:
                    tokens = shlex.split(part)
                except ValueError:
                    tokens = part.split()
                if len(tokens) > 1 and tokens[1] in SUBCOMMANDS:
                    found.append((where, tokens[1:]))
    return found


@functools.cache
def help_text(*path: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # the training commands' --help leaves most inherited TRL options to --help-all
    full = "--help-all" if path[0] in ("rft", "grpo", "teacher") else "--help"
    result = subprocess.run([sys.executable, "-m", "livethink.cli", *path, full], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, (path, result.stderr[-2000:])
    return result.stdout


def command_path(tokens: list[str]) -> tuple[str, ...]:
    """The command (and sub-command, where its usage offers ``{a,b,...}``) that ``tokens`` run."""
    usage = help_text(tokens[0]).split("\n\n", 1)[0]
    choices = re.search(r"\{([\w,-]+)\}", usage)
    if choices and len(tokens) > 1 and tokens[1] in choices.group(1).split(","):
        return (tokens[0], tokens[1])
    return (tokens[0],)


def flags(tokens: list[str]) -> list[str]:
    out = []
    for token in tokens:
        token = token.strip("[]()`,.'\"")
        if token.startswith("--") and len(token) > 2 and token != "--help":
            out.append(token.split("=", 1)[0].rstrip("]"))
    return out


def test_the_docs_have_commands_to_check():
    commands = {tokens[0] for _, tokens in documented_commands()}
    assert {"serve", "eval", "data", "ab", "rft", "grpo"} <= commands


def test_every_documented_flag_is_in_its_commands_help():
    wrong = []
    for where, tokens in documented_commands():
        path = command_path(tokens)
        text = help_text(*path)
        for flag in flags(tokens[len(path):]):
            if (where.split(":")[0], flag) in EXAMPLES:
                continue
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                wrong.append(f"{where}: livethink {' '.join(path)} {flag}")
            elif "_" in flag:  # the underscore form is an accepted alias; the docs spell flags one way
                wrong.append(f"{where}: livethink {' '.join(path)} {flag} (document it as {flag.replace('_', '-')})")
    assert not wrong, "flags the commands' --help does not list:\n" + "\n".join(sorted(set(wrong)))
