"""Enough of the POSIX shell's word rules to read a recipe script without running it.

``run_recipe.sh`` files are shell: variables assigned and expanded, strings quoted in
three ways, lines continued with backslashes, commands joined by ``&&`` and pipes,
grouped in ``( ... )``, wrapped in ``bash -c '...'``. This module turns such text into
simple commands (lists of words) the way bash would, with deliberate differences, all
because nothing is ever executed:

* expansions with other modifiers than a default or an alternative (``${X:-word}`` and
  ``${X:+word}`` are expanded; ``${X//_/-}``, ``${X%/}`` are not) stay literal text, as do
  variables the script never assigned (``$TPU_WORKER_ID``), so a caller can see what was
  left unresolved;
* a command substitution ``$(...)`` is never run. ``printf``/``echo`` of fully resolved
  words are expanded (their output is a function of their words); anything else
  (``$(date +%Y%m%d)``, ``$(whoami)``, a printf of an unresolved ``${USER//_/-}``) becomes
  the opaque word ``$(<program>)``: one word with no blanks, as the real output of such a
  name-building command is, so a later unquoted ``$NAME`` is not split on the blanks of
  the command's own text;
* no condition is evaluated and no loop is run: every command is read once, in order, so
  an assignment inside an ``if`` branch takes effect as if the branch ran;
* redirections (``2>&1``, ``> file``, ``&> /dev/null``, ``<<< word``, ``<< EOF``) are
  taken out of the words: ``python3 ... 2>&1 | tee train.log`` is the words of
  ``python3 ...`` then those of ``tee train.log``. A here-document's body is never read as
  commands; ``read NAME <<'EOF'`` (or ``<<< word``) assigns it to NAME;
* ``( ... )`` only separates commands (a subshell's assignments are kept like any other);
  ``NAME=(a b)`` is an array, ``"${NAME[@]}"`` its elements as separate words (none for
  an empty array), ``$NAME`` its first element.

Assignments (``X=...``, ``X+=...``, ``export X=...``) update the variables as the
commands are read, so a later ``$X`` sees the value the script gave it by then.

Bounded, as a shell is not: variable expansion of one text may produce at most
``MAX_EXPANDED_CHARS`` characters in all (``X=$X$X`` repeated doubles a value each line),
and ``${X:-${Y:-...}}`` defaults may nest ``MAX_NESTING`` deep (each level is read
again). Past either is a ``ShellTooBig`` line, not minutes of work or gigabytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

from toolkit.errors import ToolkitError

_VARIABLE = r"[A-Za-z_][A-Za-z0-9_]*"  # the shell's name rule (also what a MaxText key=value key must be)
NAME = re.compile(_VARIABLE)
_DEFAULT = re.compile(rf"({_VARIABLE})(:?)([-+])(.*)", re.S)
_ARRAY = re.compile(rf"({_VARIABLE})\[([@*])\]")
_ASSIGN = re.compile(rf"^({_VARIABLE})(\+?)=(.*)$", re.S)
_DQ_ESCAPES = '$`"\\'
_DECLARE = ("export", "declare", "readonly", "local")
# Array values live in the same mapping under "<name>[@]", elements joined by this separator
# (a name cannot hold "[", so no script variable can collide with it).
_ARRAY_SEP = "\x1f"
# Redirection operators, longest first; "&>" / "&>>" redirect both output streams.
_REDIRECTS = ("<<<", "<<-", "&>>", "<<", ">>", ">&", "<&", "<>", ">|", "&>", ">", "<")


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


@dataclass
class Redirect:
    """One redirection of a command: the operator and its word (a here-document's body for ``<<``)."""

    op: str
    target: str
    body: str | None = None


class _Lexer:
    def __init__(self, text: str, env: MutableMapping[str, str], budget: _Budget | None = None, depth: int = 0) -> None:
        if depth > MAX_NESTING:
            raise ShellTooBig(f"nests ${{X:-...}} defaults more than {MAX_NESTING} deep")
        self.text, self.env, self.i = text, env, 0
        self.budget, self.depth = budget or _Budget(), depth
        self.words: list[str] = []
        self.word: list[str] = []
        self.started = False
        self.redirects: list[Redirect] = []  # of the command being read
        self.last_redirects: list[Redirect] = []  # of the command last yielded
        self.redirect_op: str | None = None  # waiting for its target word, which starts at target_start
        self.target_start = 0
        self.body_cursor: int | None = None  # where the next here-document body starts, once one is open

    def _flush(self) -> None:
        if self.started:
            word = "".join(self.word)
            if self.redirect_op is not None:
                self._redirected(self.redirect_op, word)
                self.redirect_op = None
            else:
                self.words.append(word)
        self.word, self.started = [], False

    def _redirected(self, op: str, target: str) -> None:
        r = Redirect(op, target)
        self.redirects.append(r)
        if op in ("<<", "<<-"):
            r.body = self._heredoc(target, strip=op == "<<-", expand=not any(q in self.text[self.target_start : self.i] for q in "'\"\\"))

    def _heredoc(self, delimiter: str, *, strip: bool, expand: bool) -> str:
        """The body of a here-document whose delimiter was just read: the lines after this one up to the delimiter.

        Read now, so the command is complete when it is yielded; the lexer skips the body when it reaches the line end.
        """
        t = self.text
        if self.body_cursor is None:
            end = t.find("\n", self.i)
            self.body_cursor = len(t) if end < 0 else end + 1
        lines: list[str] = []
        while self.body_cursor < len(t):
            end = t.find("\n", self.body_cursor)
            end = len(t) if end < 0 else end
            line = t[self.body_cursor : end]
            self.body_cursor = min(end + 1, len(t))
            line = line.lstrip("\t") if strip else line
            if line == delimiter:
                break
            lines.append(line)
        body = "".join(f"{line}\n" for line in lines)
        return _Lexer(body, self.env, self.budget, self.depth + 1).expand_word() if expand else body

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

    def _array(self, name: str) -> list[str] | None:
        joined = self.env.get(f"{name}[@]")
        if joined is None:
            return None
        return joined.split(_ARRAY_SEP) if joined else []

    def _dollar(self) -> tuple[str, bool]:
        """The expansion at ``$``: (text, expanded from a variable)."""
        t, i = self.text, self.i
        if t.startswith("$((", i):  # arithmetic: left as written
            end = self._close("(", ")", i + 2)
            self.i = end + 1
            return t[i : end + 1], False
        if t.startswith("$(", i):
            end = self._close("(", ")", i + 2)
            self.i = end + 1
            return self.budget.spend(_substitute(t[i + 2 : end], self.env, self.depth)), False
        if t.startswith("${", i):
            end = self._close("{", "}", i + 2)
            inner, self.i = t[i + 2 : end], end + 1
            if NAME.fullmatch(inner) and inner in self.env:
                return self.budget.spend(self.env[inner]), True
            array = _ARRAY.fullmatch(inner)
            if array and self._array(array.group(1)) is not None:
                return self.budget.spend(" ".join(self._array(array.group(1)) or [])), True
            default = _DEFAULT.fullmatch(inner)
            if default:
                # ${X:-word} / ${X-word}: X's value, else the word; ${X:+word} / ${X+word}: the word if X is set
                # (and not empty, with ":"), else nothing. The word is itself expanded, as in bash.
                name, colon, kind, word = default.groups()
                value = self.env.get(name)
                present = value is not None and (bool(value) or not colon)
                if kind == "-" and present:
                    return self.budget.spend(value or ""), True
                if kind == "+" and not present:
                    return "", True
                return _Lexer(word, self.env, self.budget, self.depth + 1).expand_word(), True
            return t[i : end + 1], False
        m = NAME.match(t, i + 1)
        if m:
            self.i = m.end()
            return (self.budget.spend(self.env[m.group()]), True) if m.group() in self.env else ("$" + m.group(), False)
        self.i = i + 1
        return "$", False

    def _quoted_array(self) -> bool:
        """``"${NAME[@]}"`` alone in its quotes: each element a word, none for an empty array."""
        m = re.compile(rf'"\$\{{({_VARIABLE})\[@\]\}}"').match(self.text, self.i)
        if not m or self._array(m.group(1)) is None:
            return False
        items = self._array(m.group(1)) or []
        self.i = m.end()
        for n, item in enumerate(items):
            if n:
                self._flush()
            self._add(self.budget.spend(item))
        return True

    def _double(self) -> None:
        if not self.started and self._quoted_array():
            return
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
        """The whole text as the one word it makes inside double quotes (for ``${X:-word}`` and here-documents)."""
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

    def _redirect_at(self) -> str | None:
        """The redirection operator starting here (after an optional file-descriptor number in the word so far)."""
        t, i = self.text, self.i
        if self.started and not all(p.isdigit() for p in self.word):
            return None  # a > inside a word such as a=b>c is not taken apart (no recipe writes it)
        return next((op for op in _REDIRECTS if t.startswith(op, i)), None)

    def _array_assignment(self) -> bool:
        """``NAME=(words)`` at ``(``: store the elements; True when that is what this was."""
        word = "".join(self.word)
        m = re.fullmatch(rf"({_VARIABLE})(\+?)=", word) if self.started else None
        if not m or self.words:
            return False
        end = self._close("(", ")", self.i + 1)
        inner = _Lexer(self.text[self.i + 1 : end], self.env, self.budget, self.depth + 1)
        items = [w for words, _ in inner.commands() for w in words]
        name = m.group(1)
        if m.group(2):
            items = (self._array(name) or []) + items
        self.env[f"{name}[@]"] = _ARRAY_SEP.join(items)
        self.env[name] = items[0] if items else ""
        self.i = end + 1
        self.word, self.started = [], False
        return True

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
            elif c in "<>&" and self._redirect_at():
                op = self._redirect_at() or ""
                self.word, self.started = [], False  # the file-descriptor number, if any
                self.i += len(op)
                while self.i < len(t) and t[self.i] in " \t":
                    self.i += 1
                self.redirect_op, self.target_start = op, self.i
            elif c in " \t\r":
                self._flush()
                self.i += 1
            elif c == "(" and self._array_assignment():
                continue
            elif c in "()":
                self.i += 1
                yield from self._end(";")
            elif c in "\n;&|":
                op = t[self.i : self.i + 2] if t[self.i : self.i + 2] in ("&&", "||") else (";" if c == "\n" else c)
                self._flush()  # before the line end is passed: a here-document's delimiter may end here
                self.i += len(op) if op != ";" or c == ";" else 1
                if c == "\n" and self.body_cursor is not None:
                    self.i, self.body_cursor = self.body_cursor, None
                yield from self._end(op)
            else:
                self._add(c)
                self.i += 1
        yield from self._end(";")

    def _end(self, op: str) -> Iterator[tuple[list[str], str]]:
        self._flush()
        self.redirect_op = None
        words, self.words = self.words, []
        self.last_redirects, self.redirects = self.redirects, []
        if words or self.last_redirects:
            yield words, op


def _substitute(inner: str, env: MutableMapping[str, str], depth: int) -> str:
    """What ``$(inner)`` stands for, without running it (see the module docstring)."""
    # A subshell: its assignments do not reach the script's variables.
    found = [(w, op) for w, op in _Lexer(inner, dict(env), depth=depth + 1).commands() if w]
    if len(found) != 1 or not found[0][0]:
        return "$(...)"
    words = found[0][0]
    program = words[0].rsplit("/", 1)[-1]
    if not all("$" not in w and "`" not in w for w in words):
        return f"$({program})"
    if program == "echo":
        return " ".join(w for w in words[1:] if w != "-n")
    if program == "printf" and len(words) > 1:
        out = _printf(words[1], words[2:])
        if out is not None:
            return out
    return f"$({program})"


_PRINTF_SPEC = re.compile(r"%(-?)(\d*)(?:\.(\d+))?([sd%])", re.ASCII)


def _printf(fmt: str, args: list[str]) -> str | None:
    """printf's %s, %.Ns, %Ns, %-Ns, %d and %% (the forms run scripts use to build names); None for others."""
    if re.search(r"%(?!-?\d*(?:\.\d+)?[sd%])", fmt, re.ASCII) or "\\" in fmt:
        return None
    queue = list(args)

    def one(m: re.Match[str]) -> str:
        left, width, precision, conv = m.groups()
        if conv == "%":
            return "%"
        arg = queue.pop(0) if queue else ""
        if conv == "d" and not re.fullmatch(r"-?\d+", arg or "0", re.ASCII):
            raise ValueError(arg)
        text = arg[: int(precision)] if precision is not None and conv == "s" else (arg or ("0" if conv == "d" else ""))
        return text.ljust(int(width)) if left else text.rjust(int(width or 0))

    try:
        out = _PRINTF_SPEC.sub(one, fmt)
    except ValueError:
        return None
    # printf reuses the format while arguments remain; run scripts never rely on it.
    return None if queue else out


def assignment(word: str) -> tuple[str, str] | None:
    """``NAME=value`` (or ``NAME+=value``) as (NAME, value); None for any other word."""
    m = _ASSIGN.fullmatch(word)
    return (m.group(1), m.group(3)) if m else None


def _apply(env: MutableMapping[str, str], word: str) -> None:
    m = _ASSIGN.fullmatch(word)
    if m:
        name, append, value = m.groups()
        env[name] = env.get(name, "") + value if append else value


@dataclass(frozen=True)
class Command:
    """A simple command as read: its words, the operator after it, and its redirections."""

    words: list[str]
    op: str
    redirects: list[Redirect]


def read_commands(text: str, env: MutableMapping[str, str]) -> Iterator[Command]:
    """The simple commands of ``text`` with their redirections, applying assignments to ``env``.

    Leading ``NAME=value`` words (alone, or after ``export``) are assignments; they are
    applied before the next command is read (and stay in the words a caller sees).
    ``read [-r] [-d X] NAME <<< word`` and ``read ... NAME << EOF`` set NAME to the word
    or the here-document (whole, as ``read -d ''`` reads it).
    """
    lexer = _Lexer(text, env)
    for words, op in lexer.commands():
        yield from _command(words, op, lexer.last_redirects, env)


def _command(words: list[str], op: str, redirects: list[Redirect], env: MutableMapping[str, str]) -> Iterator[Command]:
    if not words:
        return
    rest = words[1:] if words[0] in _DECLARE else words
    pairs = [w for w in rest if assignment(w)]
    if words[0] in _DECLARE or len(pairs) == len(rest):
        for w in pairs:
            _apply(env, w)
    if words[0] == "read":
        names = [w for w in words[1:] if NAME.fullmatch(w)]
        given = next((r for r in redirects if r.op in ("<<<", "<<", "<<-")), None)
        if len(names) == 1 and given is not None:
            env[names[0]] = given.target if given.op == "<<<" else (given.body or "")
    yield Command(words, op, redirects)


def commands(text: str, env: MutableMapping[str, str]) -> Iterator[tuple[list[str], str]]:
    """The simple commands of ``text`` with their words, applying assignments to ``env`` (see ``read_commands``)."""
    for c in read_commands(text, env):
        yield c.words, c.op
