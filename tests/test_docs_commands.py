"""Every flag of every `livethink ...` command in README.md and docs/*.md is one its `--help` lists, spelled as
`--help` spells it first, with dashes (code blocks, with their continuation lines, and inline code spans)."""

from __future__ import annotations

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


# Every --help in one interpreter: each start-up imports TRL (5-9 s), and the docs name a dozen commands.
_HELP_SCRIPT = """
import contextlib, io, json, sys
from livethink.cli import main
out = {}
for path in json.loads(sys.argv[1]):
    full = "--help-all" if path[0] in ("rft", "grpo", "teacher") else "--help"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = main([*path, full])
        except SystemExit as exc:
            code = exc.code or 0
    out[" ".join(path)] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def help_texts(paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Each command path's ``--help`` (the training commands' ``--help-all``: their ``--help`` leaves most
    inherited TRL options out), from one subprocess."""
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", _HELP_SCRIPT, json.dumps([list(p) for p in paths])], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = {}
    for key, (code, text) in json.loads(result.stdout.splitlines()[-1]).items():
        assert code == 0, (key, text[-2000:])
        out[tuple(key.split(" "))] = text
    return out


_HELP: dict[tuple[str, ...], str] = {}


def help_text(*path: str) -> str:
    if path not in _HELP:
        _HELP.update(help_texts([path]))
    return _HELP[path]


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
    commands = documented_commands()
    _HELP.update(help_texts(sorted({(tokens[0],) for _, tokens in commands} - set(_HELP))))
    subs = {command_path(tokens) for _, tokens in commands}
    _HELP.update(help_texts(sorted(subs - set(_HELP))))
    wrong = []
    for where, tokens in commands:
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
