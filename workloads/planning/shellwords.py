"""Enough of the POSIX shell's word rules to read a recipe script without running it.

``run_recipe.sh`` files are shell: variables assigned and expanded, strings quoted in
three ways, lines continued with backslashes, commands joined by ``&&`` and pipes. This
module turns such text into simple commands (lists of words) the way bash would, with
two deliberate differences, both because nothing is ever executed:

* command substitutions ``$(...)`` and expansions with other modifiers than a default
  (``${X:-word}`` is expanded; ``${X//_/-}`` is not) stay literal text, as do variables
  the script never assigned (``$TPU_WORKER_ID``), so a caller can see what was left
  unresolved;
* redirections are ordinary word characters.

Assignments (``X=...``, ``export X=...``) update the variables as the commands are read,
so a later ``$X`` sees the value the script gave it by then.

Bounded, as a shell is not: variable expansion of one text may produce at most
``MAX_EXPANDED_CHARS`` characters in all (``X=$X$X`` repeated doubles a value each line),
and ``${X:-${Y:-...}}`` defaults may nest ``MAX_NESTING`` deep (each level is read
again). Past either is a ``ShellTooBig`` line, not minutes of work or gigabytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, MutableMapping

from toolkit.errors import ToolkitError

_VARIABLE = r"[A-Za-z_][A-Za-z0-9_]*"  # the shell's name rule (also what a MaxText key=value key must be)
NAME = re.compile(_VARIABLE)
_DEFAULT = re.compile(rf"({_VARIABLE})(:?)-(.*)", re.S)
_ASSIGN = re.compile(rf"^({_VARIABLE})=(.*)$", re.S)
_DQ_ESCAPES = '$`"\\'
_DECLARE = ("export", "declare", "readonly", "local")


# A tpu-recipes script expands a few KiB of variables; a run script itself is at most 1 MiB.
MAX_EXPANDED_CHARS = 4 * 1024 * 1024
MAX_NESTING = 16  # ${X:-${Y:-...}} levels; real scripts nest one or two


class ShellError(ToolkitError):
    """Text that is not well-formed shell (an unterminated quote or expansion)."""

    fix = "fix the quoting"

    @property
    def problem(self) -> str:
        return f"is not well-formed shell: {self}"


class ShellTooBig(ShellError):
    """Expansion past the bounds (``MAX_EXPANDED_CHARS``, ``MAX_NESTING``)."""

    fix = "write the values out instead of building them from variables"

    @property
    def problem(self) -> str:
        return str(self)


class _Budget:
    """Characters variable expansion may still produce, shared by a text and the defaults nested in it."""

    def __init__(self) -> None:
        self.left = MAX_EXPANDED_CHARS

    def spend(self, value: str) -> str:
        self.left -= len(value)
        if self.left < 0:
            raise ShellTooBig(f"expands its variables to more than {MAX_EXPANDED_CHARS // (1024 * 1024)} MiB of text (a variable doubled again and again?)")
        return value


class _Lexer:
    def __init__(self, text: str, env: MutableMapping[str, str], budget: _Budget | None = None, depth: int = 0) -> None:
        if depth > MAX_NESTING:
            raise ShellTooBig(f"nests ${{X:-...}} defaults more than {MAX_NESTING} deep")
        self.text, self.env, self.i = text, env, 0
        self.budget, self.depth = budget or _Budget(), depth
        self.words: list[str] = []
        self.word: list[str] = []
        self.started = False

    def _flush(self) -> None:
        if self.started:
            self.words.append("".join(self.word))
        self.word, self.started = [], False

    def _add(self, s: str) -> None:
        self.word.append(s)
        self.started = True

    def _close(self, opener: str, closer: str, start: int) -> int:
        """Index of the closer that balances ``opener`` (quotes inside are skipped)."""
        depth, j, t = 1, start, self.text
        while j < len(t):
            c = t[j]
            if c in "'\"":
                j = t.find(c, j + 1)
                if j < 0:
                    break
            elif c == opener:
                depth += 1
            elif c == closer:
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise ShellError(f"unterminated {'$' + opener} expansion")

    def _dollar(self) -> tuple[str, bool]:
        """The expansion at ``$``: (text, expanded from a variable)."""
        t, i = self.text, self.i
        if t.startswith("$(", i):
            end = self._close("(", ")", i + 2)
            self.i = end + 1
            return t[i : end + 1], False
        if t.startswith("${", i):
            end = self._close("{", "}", i + 2)
            inner, self.i = t[i + 2 : end], end + 1
            if NAME.fullmatch(inner) and inner in self.env:
                return self.budget.spend(self.env[inner]), True
            default = _DEFAULT.fullmatch(inner)
            if default:
                # ${X:-word} / ${X-word}: X's value, else the word (itself expanded, as in bash).
                name, colon, word = default.groups()
                value = self.env.get(name)
                if value is not None and (value or not colon):
                    return self.budget.spend(value), True
                return _Lexer(word, self.env, self.budget, self.depth + 1).expand_word(), True
            return t[i : end + 1], False
        m = NAME.match(t, i + 1)
        if m:
            self.i = m.end()
            return (self.budget.spend(self.env[m.group()]), True) if m.group() in self.env else ("$" + m.group(), False)
        self.i = i + 1
        return "$", False

    def _double(self) -> None:
        t = self.text
        self.i += 1
        self._add("")
        while self.i < len(t):
            c = t[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < len(t) and t[self.i + 1] in _DQ_ESCAPES + "\n":
                self._add("" if t[self.i + 1] == "\n" else t[self.i + 1])
                self.i += 2
            elif c == "$":
                self._add(self._dollar()[0])
            else:
                self._add(c)
                self.i += 1
        raise ShellError('unterminated double quote (")')

    def _unquoted_dollar(self) -> None:
        value, expanded = self._dollar()
        if not expanded:
            self._add(value)
            return
        # An unquoted expansion is split into words, as the shell does.
        parts = value.split()
        if value[:1].isspace():
            self._flush()
        for n, part in enumerate(parts):
            if n:
                self._flush()
            self._add(part)
        if value[-1:].isspace():
            self._flush()

    def expand_word(self) -> str:
        """The whole text as the one word it makes inside double quotes (for ``${X:-word}``)."""
        out: list[str] = []
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "$":
                out.append(self._dollar()[0])
            elif c == '"':
                self.i += 1  # quotes inside the word only group; they add nothing
            elif c == "\\" and self.i + 1 < len(self.text):
                out.append(self.text[self.i + 1])
                self.i += 2
            else:
                out.append(c)
                self.i += 1
        return "".join(out)

    def commands(self) -> Iterator[tuple[list[str], str]]:
        """(words, the operator that ends them); ``;`` for a newline or the end."""
        t = self.text
        while self.i < len(t):
            c = t[self.i]
            if c == "\\" and self.i + 1 < len(t):
                if t[self.i + 1] != "\n":
                    self._add(t[self.i + 1])
                self.i += 2
            elif c == "'":
                end = t.find("'", self.i + 1)
                if end < 0:
                    raise ShellError("unterminated single quote (')")
                self._add(t[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self._double()
            elif c == "$":
                self._unquoted_dollar()
            elif c == "#" and not self.started:
                end = t.find("\n", self.i)
                self.i = len(t) if end < 0 else end
            elif c in " \t\r":
                self._flush()
                self.i += 1
            elif c in "\n;&|":
                op = t[self.i : self.i + 2] if t[self.i : self.i + 2] in ("&&", "||") else (";" if c == "\n" else c)
                self.i += len(op) if op != ";" or c == ";" else 1
                yield from self._end(op)
            else:
                self._add(c)
                self.i += 1
        yield from self._end(";")

    def _end(self, op: str) -> Iterator[tuple[list[str], str]]:
        self._flush()
        words, self.words = self.words, []
        if words:
            yield words, op


def assignment(word: str) -> tuple[str, str] | None:
    m = _ASSIGN.match(word)
    return (m.group(1), m.group(2)) if m else None


def commands(text: str, env: MutableMapping[str, str]) -> Iterator[tuple[list[str], str]]:
    """The simple commands of ``text`` with their words, applying assignments to ``env``.

    Leading ``NAME=value`` words (alone, or after ``export``) are assignments; they are
    applied before the next command is read and removed from the words yielded.
    """
    for words, op in _Lexer(text, env).commands():
        rest = words[1:] if words[0] in _DECLARE else words
        pairs = [a for a in map(assignment, rest) if a]
        if words[0] in _DECLARE or len(pairs) == len(rest):
            env.update(pairs)
        yield words, op
