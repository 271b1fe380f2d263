"""The shell lexer: commands as lists of located words, in shell scripts, Makefile recipes,
Windows batch files (`^` continues a line), PowerShell scripts (`` ` `` continues a line and
escapes a character; `\\` is a path's), Dockerfile shell forms and YAML scalars.
"""

from __future__ import annotations

import re

from specgguf.migrate.word import Word, link_words

_BLANK = " \t\r\f\v"
_OPERATORS = ";&|()<>"
_PLACEHOLDER = re.compile(r"<[A-Za-z][\w.:/-]*>(?=[\s;|&)]|$)")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")


class _ShellLexer:
    """POSIX-shell words, enough of them to find and edit commands.

    It knows quoting, escapes, `\\`-newline continuations, comments, command separators,
    redirections, $VAR / ${...} / $(...) / backticks (marked dynamic). It is not a shell: it
    does not expand anything, and heredoc bodies are read as commands.
    """

    def __init__(self, text: str, start: int, end: int, newline_is_space: bool,
                 bat: bool = False, placeholders: bool = False, ps: bool = False) -> None:
        self.text, self.i, self.end = text, start, end
        self.newline_is_space = newline_is_space
        self.bat = bat
        self.ps = ps  # PowerShell: ` continues and escapes, \ is an ordinary character
        self.mark = "^" if bat else "`" if ps else "\\"  # what continues a line
        self.escape = "" if bat else self.mark  # what takes the next character as it is
        self.placeholders = placeholders  # documentation: `<draft.gguf>` is a word

    def commands(self) -> list[list[Word]]:
        commands: list[list[Word]] = []
        current: list[Word] = []
        redirect_next = False
        text, end = self.text, self.end
        while self.i < end:
            c = text[self.i]
            if c in _BLANK:
                self.i += 1
            elif c == self.mark and self._continuation(self.i):
                self.i += self._continuation(self.i)
                self._prompt()
            elif c == "\n":
                self.i += 1
                if not self.newline_is_space:
                    commands.append(current)
                    current = []
            elif c == "#":
                nl = text.find("\n", self.i, end)
                self.i = end if nl < 0 else nl
            elif c == "<" and self.placeholders and _PLACEHOLDER.match(text, self.i, end):
                m = _PLACEHOLDER.match(text, self.i, end)
                current.append(Word(m.group(0), self.i, m.end(), tuple(range(self.i, m.end()))))
                self.i = m.end()
            elif c in "<>" or (c == "&" and text.startswith(">", self.i + 1)):
                while self.i < end and text[self.i] in "<>&|-":
                    self.i += 1
                redirect_next = True
            elif c == "(" and current and current[-1].end == self.i \
                    and _ASSIGNMENT.fullmatch(current[-1].value):
                current.pop()  # `name=(`: the array's words are one list, whatever the lines
                commands += [current, self._array()]
                current = []
            elif c in _OPERATORS:
                while self.i < end and text[self.i] in ";&|":
                    self.i += 1
                self.i += c in "()"
                commands.append(current)
                current = []
            else:
                word = self._word()
                if redirect_next or (word.value.isdigit() and text.startswith(("<", ">"),
                                                                               self.i)):
                    word.redirect = True
                redirect_next = False
                current.append(word)
        commands.append(current)
        for cmd in commands:
            link_words(cmd)
        return [cmd for cmd in commands if cmd]

    def _array(self) -> list[Word]:
        """The words of a bash array `name=( ... )`, newlines and comments inside included."""
        text, end = self.text, self.end
        self.i += 1
        words: list[Word] = []
        while self.i < end:
            c = text[self.i]
            if c in _BLANK or c == "\n":
                self.i += 1
            elif c == self.mark and self._continuation(self.i):
                self.i += self._continuation(self.i)
            elif c == "#":
                nl = text.find("\n", self.i, end)
                self.i = end if nl < 0 else nl
            elif c == ")":
                self.i += 1
                break
            elif c in _OPERATORS:  # not an array after all: let the caller go on
                break
            else:
                words.append(self._word())
        return words

    def _continuation(self, i: int) -> int:
        if self.text.startswith(self.mark + "\n", i):
            return 2
        return 3 if self.text.startswith(self.mark + "\r\n", i) else 0

    def _prompt(self) -> None:
        """In documentation, the `> ` a console session shows before a continued line (PS2) is
        the prompt's, not a redirection."""
        if not self.placeholders:
            return
        m = re.compile(r"[ \t]*>[ \t]").match(self.text, self.i, self.end)
        if m:
            self.i = m.end()

    def _word(self) -> Word:
        text, end, start = self.text, self.end, self.i
        chars: list[str] = []
        pos: list[int] = []
        dynamic = False
        quoted_segments, bare = 0, 0
        quote = ""
        while self.i < end:
            c = text[self.i]
            if c in _BLANK or c == "\n" or c in _OPERATORS:
                break
            if c == self.mark and self._continuation(self.i):
                self.i += self._continuation(self.i)
                continue
            if c == "%" and self.bat and re.match(r"%[\w~:.,=-]+%", text[self.i:self.i + 64]):
                dynamic = True  # %VAR%: the batch file decides
            if c == self.escape and self.i + 1 < end:  # the next character as it is
                chars.append(text[self.i + 1])
                pos.append(self.i + 1)
                self.i += 2
                bare += 1
                continue
            if c == "'":
                close = text.find("'", self.i + 1, end)
                close = end if close < 0 else close
                chars.extend(text[self.i + 1:close])
                pos.extend(range(self.i + 1, close))
                self.i = close + 1
                quoted_segments, quote = quoted_segments + 1, "'"
            elif c == '"':
                dynamic |= self._double(chars, pos)
                quoted_segments, quote = quoted_segments + 1, '"'
            elif c == "$" or (c == "`" and not self.ps):
                dynamic = True
                self._expansion(chars, pos)
                bare += 1
            else:
                chars.append(c)
                pos.append(self.i)
                self.i += 1
                bare += 1
        whole = quote if quoted_segments == 1 and not bare else ""
        return Word("".join(chars), start, self.i, tuple(pos), dynamic, whole)

    def _double(self, chars: list[str], pos: list[int]) -> bool:
        text, end = self.text, self.end
        self.i += 1
        dynamic = False
        while self.i < end:
            c = text[self.i]
            if c == '"':
                self.i += 1
                break
            escape = "`" if self.ps else "\\"
            if c == escape and self.i + 1 < end and (self.ps or text[self.i + 1] in '$`"\\\n'):
                if text[self.i + 1] != "\n":
                    chars.append(text[self.i + 1])
                    pos.append(self.i + 1)
                self.i += 2
            elif c == "$" or (c == "`" and not self.ps):
                dynamic = True
                self._expansion(chars, pos)
            else:
                chars.append(c)
                pos.append(self.i)
                self.i += 1
        return dynamic

    def _expansion(self, chars: list[str], pos: list[int]) -> None:
        """Copy $x, ${...}, $(...) or `...` verbatim: one unit, whatever it contains."""
        text, end, i = self.text, self.end, self.i
        if text[i] == "`":
            close = text.find("`", i + 1, end)
            j = end if close < 0 else close + 1
        elif text.startswith(("$(", "${"), i):
            opener = text[i + 1]
            closer = ")" if opener == "(" else "}"
            depth, j = 0, i + 1
            while j < end:
                depth += (text[j] == opener) - (text[j] == closer)
                j += 1
                if depth == 0:
                    break
        else:
            j = i + 1
        chars.extend(text[i:j])
        pos.extend(range(i, j))
        self.i = j


def lex_shell(text: str, start: int = 0, end: int | None = None, *,
              newline_is_space: bool = False, bat: bool = False,
              placeholders: bool = False, ps: bool = False) -> list[list[Word]]:
    """Commands (lists of words) in text[start:end]; `bat`: Windows batch (`^` continues);
    `ps`: PowerShell (`` ` `` continues); `placeholders`: documentation, where `<draft.gguf>`
    is a word, not a redirection, and a continued line's `> ` prompt is skipped."""
    return _ShellLexer(text, start, len(text) if end is None else end,
                       newline_is_space, bat, placeholders, ps).commands()
