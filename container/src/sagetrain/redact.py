"""Secrets: which names look secret, which variables stay on their host, and masking secret values in
everything we print or write about the job (log lines, the dry run, the failure file, rank reports).

What is secret (``Redactor.for_job``): the value of a hyperparameter, an environment variable or a
``-x NAME=VALUE`` mpirun option whose name looks secret (``looks_secret``), at any depth of a dict- or
list-valued hyperparameter (``{"db": {"password": ...}}``), also inside a string that holds JSON; and
the password of a URL written with one (``scheme://user:password@host``), wherever it is.

How it is masked: by structure first, text last. Where we make text out of parts (an argv joined for the
log, the dry run's JSON, a log record's arguments), each part is masked before it is quoted, joined or
dumped, so no quoting can carry a secret past the mask. Text we did not make (a cause quoting an
exception's repr, the program's last lines) is masked in every form a value takes under the escapings a
job applies to it: as given, inside JSON, inside a Python repr, inside shell single quotes, and any two
of these in turn (the toolkit's ``SM_USER_ARGS`` is a JSON list of arguments that may hold a dict's
repr). The program still receives every value unchanged; only our own text about it is masked. Pure.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MASK = "***"
# Each host has its own credential provider (SageMaker's container credentials, an instance role): these
# are never copied from one host's environment to another's.
AWS_CREDENTIAL_VARS = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    }
)
# Values with fewer characters than this (whitespace not counted) are not masked: masking "1", "on" or a
# run of spaces everywhere would garble every line, and a secret that short protects nothing.
MIN_MASKED_LENGTH = 4

# A name's words: split at anything but letters and digits (_ - . /) and at camelCase boundaries, so
# "dbPassword", "HFToken" and "AWS_SECRET_ACCESS_KEY" are read word by word. A word, not a substring,
# decides: "keras", "monkey", "passes", "author", "tokenizer" and "path" hold no secret word.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# A secret word, or one glued to the word that usually comes before it ("apikey", "accesstoken").
_SECRET_WORD = re.compile(
    r"(?:api|access|secret|private|session|auth|client|bearer|refresh|id|ssh|signing|encryption|master|pass)?"
    r"(?:keys?|tokens?|secrets?|passwords?|passwd|pass|pwd|pw|passphrase|passcode|pat|credentials?|creds?"
    r"|auth|authorization|private)"
)
# "key" and "token" also name what is no secret: a tokenizer's vocabulary (pad_token, eos_token_id),
# counts and sizes (max_tokens, num_keys, key_length, key_dim) and a dataset's fields (label_key). Next
# to one of these words they are not taken as secret.
_VOCABULARY_WORDS = frozenset({"key", "keys", "token", "tokens"})
_NOT_SECRET_BEFORE = frozenset(
    {"pad", "eos", "bos", "unk", "mask", "sep", "cls", "special", "start", "end", "stop", "max", "min", "num",
     "n", "total", "sort", "label", "text", "image", "input", "output", "target", "feature", "column",
     "metric", "monitor", "public"}
)  # fmt: skip
_NOT_SECRET_AFTER = frozenset(
    {"count", "counts", "len", "length", "size", "limit", "limits", "num", "number", "index", "idx", "type",
     "dim", "dims"}
)  # fmt: skip
# The shell's working directories, not passwords.
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# A name ending in one of these says where a secret is kept, not the secret: sagetrain_job_secret_channel,
# ssh_key_path, a secret's ARN in a secrets manager.
_LOCATION_WORDS = frozenset({"channel", "file", "path", "dir", "folder", "location", "arn"})
# The password of a URL that carries one: scheme://user:password@host
_URL_PASSWORD = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:([^\s/?#@]+)@")
# JSON literals and booleans: no secret, and everywhere.
_NOT_SECRET_VALUES = frozenset({"true", "false", "null", "none"})


def looks_secret(name: str) -> bool:
    if name in _NOT_SECRET_NAMES:
        return False
    words = [word.lower() for word in _WORD.findall(name)]
    if words and words[-1] in _LOCATION_WORDS:
        return False
    for index, word in enumerate(words):
        if not _SECRET_WORD.fullmatch(word):
            continue
        before = words[index - 1] if index > 0 else ""
        after = words[index + 1] if index + 1 < len(words) else ""
        if word in _VOCABULARY_WORDS and (before in _NOT_SECRET_BEFORE or after in _NOT_SECRET_AFTER):
            continue
        return True
    return False


def stays_on_host(name: str) -> bool:
    """Whether an environment variable is withheld from other hosts (mpirun -x): credentials, and
    anything whose name looks secret. Each host's rank launcher takes these from its own host."""
    return name in AWS_CREDENTIAL_VARS or looks_secret(name)


def _parsed(value: Any) -> Any:
    """A string that holds a JSON object or array, parsed; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _leaves(value: Any) -> Iterator[Any]:
    """Every scalar under ``value``, and every string (also one that holds JSON: then its leaves too)."""
    pending = [value]
    while pending:
        item = pending.pop()
        parsed = _parsed(item)
        if isinstance(item, str) or not isinstance(parsed, dict | list):
            yield item
        if isinstance(parsed, dict):
            pending.extend(parsed.values())
        elif isinstance(parsed, list):
            pending.extend(parsed)


def nested_secrets(name: str, value: Any) -> list[Any]:
    """The secret values in an entry ``name: value``: all of ``value`` when ``name`` looks secret, else
    what is under each key that does at any depth of ``value``; and every URL's password. Iterative:
    the value may be nested as deep as JSON allows."""
    found: list[Any] = []
    pending: list[tuple[str, Any]] = [(name, value)]
    while pending:
        key, item = pending.pop()
        if looks_secret(key):
            found += _leaves(item)
            continue
        parsed = _parsed(item)
        if isinstance(parsed, dict):
            pending.extend((str(inner_key), inner) for inner_key, inner in parsed.items())
        elif isinstance(parsed, list):
            pending.extend(("", inner) for inner in parsed)
        elif isinstance(item, str):
            found += _URL_PASSWORD.findall(item)
    return found


def secret_option_values(mpi_options: Sequence[str]) -> list[str]:
    """The values of ``-x NAME=VALUE`` options whose NAME looks secret, and URL passwords."""
    values = []
    for flag, argument in itertools.pairwise(mpi_options):
        name, separator, value = argument.partition("=")
        if flag.lstrip("-") == "x" and separator:
            values += nested_secrets(name, value)
    return values


def shell_words(text: str) -> list[str]:
    """``text`` cut into words as a POSIX shell cuts it, each as written (quotes and backslashes kept), so
    a value can be masked in the text it was written in. Lenient: an open quote runs to the end."""
    words: list[str] = []
    start: int | None = None
    quote = ""
    escaped = False
    for index, char in enumerate(text):
        if start is None and not char.isspace():
            start = index
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in ("'", '"'):
            quote = char
        elif char.isspace() and start is not None:
            words.append(text[start:index])
            start = None
    if start is not None:
        words.append(text[start:])
    return words


def _unquoted(word: str) -> str:
    try:
        return "".join(shlex.split(word)) or word
    except ValueError:  # an open quote or a trailing backslash: the text after the quote, as written
        return word.lstrip("'\"")


def secret_option_texts(text: str) -> list[str]:
    """In mpirun options written as one shell text (``sagemaker_mpi_custom_mpi_options``): each secret
    ``-x NAME=VALUE``'s value both as mpirun gets it and as written (``'a b'``, ``a\\'b``, ``"x\\"y"``),
    so the text itself (the toolkit's SM_TRAINING_ENV and SM_FRAMEWORK_PARAMS show it) can be masked."""
    values: list[str] = []
    for flag, word in itertools.pairwise(shell_words(text)):
        value = _unquoted(word)
        name, separator, parsed = value.partition("=")
        if _unquoted(flag).lstrip("-") != "x" or not separator:
            continue
        secrets = nested_secrets(name, parsed)
        values += secrets
        if secrets and parsed in secrets:
            # As written: after NAME= when the name is written plainly, else the whole word.
            values.append(word[len(name) + 1 :] if word.startswith(name + "=") else word)
    return values


def environment_secrets(environ: Mapping[str, str]) -> list[Any]:
    """The secret values in variables: AWS credentials whole, else what ``nested_secrets`` finds."""
    values: list[Any] = []
    for name, value in environ.items():
        values += [value] if name in AWS_CREDENTIAL_VARS else nested_secrets(name, value)
    return values


def masked_value(name: str, value: Any) -> Any:
    """``value`` as a message about the entry ``name`` may quote it: every secret in it masked (a
    structure's strings one by one, so no quoting carries one past the mask)."""
    return Redactor.of(nested_secrets(name, value)).structure(value)


def masked_options_text(text: str) -> str:
    """mpirun options written as one text, with the values of secret-named ``-x NAME=VALUE`` masked as
    written."""
    return Redactor.of(secret_option_texts(text))(text)


def _text(value: Any) -> str | None:
    """A secret value as text, or None when it is no secret worth masking."""
    if value is None or isinstance(value, bool):
        return None
    text = value if isinstance(value, str) else str(value)
    if text.strip().lower() in _NOT_SECRET_VALUES:
        return None
    return text if sum(not char.isspace() for char in text) >= MIN_MASKED_LENGTH else None


def _json_inner(ascii_only: bool) -> Callable[[str], str]:
    return lambda text: json.dumps(text, ensure_ascii=ascii_only)[1:-1]


def _repr_inner(text: str) -> str:
    """Inside a Python repr quoted with ', as every repr of a text that holds a " is: ' escaped."""
    return repr(text + '"')[1:-2]


def _repr_inner_double(text: str) -> str:
    """Inside a Python repr quoted with ", as a repr of a text holding ' and no " is."""
    return repr(text + "'")[1:-2] if '"' not in text else text


def _shell_inner(text: str) -> str:
    """Inside shell single quotes, as shlex.quote writes a ' in a word it quotes."""
    return text.replace("'", "'\"'\"'")


_ESCAPINGS: tuple[Callable[[str], str], ...] = (
    _json_inner(True),
    _json_inner(False),
    _repr_inner,
    _repr_inner_double,
    _shell_inner,
)
ESCAPING_DEPTH = 2  # SM_USER_ARGS: a dict's repr inside a JSON string


def forms(secret: str) -> set[str]:
    """The texts ``secret`` appears as after up to ESCAPING_DEPTH escapings, as given included."""
    found = {secret}
    for _ in range(ESCAPING_DEPTH):
        found |= {escape(form) for form in found for escape in _ESCAPINGS}
    return found


# Masking finds where a form may begin by its first ANCHOR_CHARACTERS characters, then compares the whole
# forms that begin so, longest first. The anchors make one small regular expression, shaped as a tree of
# their characters; one alternation of every whole form (at SageMaker's limits, 100 values of 2,500
# characters: 2,000 forms, 6.7 MB) took seconds to compile and milliseconds to match each line.
ANCHOR_CHARACTERS = 8


def _tree_pattern(words: Iterable[str]) -> str:
    """A regular expression that matches where any of ``words`` begins (it may match less than a whole
    word): their characters as a tree, so that matching reads each character once, not once a word."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for character in word:
            node = node.setdefault(character, {})
        node[""] = {}  # a word ends here: what follows it need not match
    return _branches(root)


def _branches(node: dict[str, Any]) -> str:
    """A tree node's branches as a pattern (recursive to the anchors' depth, ANCHOR_CHARACTERS)."""
    if "" in node:
        return ""
    branches = [re.escape(character) + _branches(child) for character, child in sorted(node.items())]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


@dataclass(frozen=True)
class _Masker:
    """Every form of the secrets, found leftmost first and, where several begin, longest first (what one
    alternation of them, longest first, would find), each replaced by MASK."""

    anchors: re.Pattern[str]  # where a form may begin
    by_anchor: Mapping[str, tuple[str, ...]]  # a form's anchor (its first characters) → forms, longest first
    anchor_lengths: tuple[int, ...]  # of the anchors, longest first (a form shorter than one is its own)

    @classmethod
    def of(cls, forms: Iterable[str]) -> _Masker | None:
        grouped: dict[str, list[str]] = {}
        for form in forms:
            grouped.setdefault(form[:ANCHOR_CHARACTERS], []).append(form)
        if not grouped:
            return None
        by_anchor = {
            anchor: tuple(sorted(group, key=lambda form: (-len(form), form)))
            for anchor, group in grouped.items()
        }
        lengths = tuple(sorted({len(anchor) for anchor in by_anchor}, reverse=True))
        return cls(re.compile(_tree_pattern(by_anchor)), by_anchor, lengths)

    def _form_at(self, text: str, start: int) -> str | None:
        """The longest form that begins at ``start`` of ``text``, if any does. The anchors are tried
        longest first: a form with a shorter one is that anchor alone, shorter than any form before it."""
        for length in self.anchor_lengths:
            for form in self.by_anchor.get(text[start : start + length], ()):
                if text.startswith(form, start):
                    return form
        return None

    def __call__(self, text: str) -> str:
        parts: list[str] = []
        done = 0  # text before this is in parts
        search = self.anchors.search(text)
        while search is not None:
            start = search.start()
            form = self._form_at(text, start)
            if form is None:
                search = self.anchors.search(text, start + 1)
                continue
            parts += (text[done:start], MASK)
            done = start + len(form)
            search = self.anchors.search(text, done)
        return "".join(parts) + text[done:] if parts else text


@dataclass(frozen=True)
class Redactor:
    """Masks the secret values it was given: in a text, and in each part of an argv or a structure
    before it is joined or dumped."""

    secrets: tuple[str, ...] = ()  # the values as given, each long enough to mask

    @classmethod
    def of(cls, values: Iterable[Any]) -> Redactor:
        texts = {text for text in map(_text, values) if text is not None}
        return cls(tuple(sorted(texts)))

    @classmethod
    def for_job(
        cls,
        hyperparameters: Mapping[str, Any],
        mpi_options: Sequence[str],
        environ: Mapping[str, str],
        *,
        mpi_options_text: str = "",
    ) -> Redactor:
        """The secrets of a job: in its hyperparameters (nested keys too), its custom mpirun options (as
        arguments, and as the text they were written in) and its variables (AWS credentials, secret
        names, JSON values with secret keys)."""
        values: list[Any] = []
        for name, value in hyperparameters.items():
            values += nested_secrets(name, value)
        values += secret_option_values(mpi_options)
        values += secret_option_texts(mpi_options_text)
        return cls.of([*values, *environment_secrets(environ)])

    def with_values(self, values: Iterable[Any]) -> Redactor:
        """This redactor, masking ``values`` too."""
        return Redactor.of((*self.secrets, *values))

    @functools.cached_property
    def _masker(self) -> _Masker | None:
        return _Masker.of(set().union(*map(forms, self.secrets))) if self.secrets else None

    def __call__(self, text: str) -> str:
        return text if self._masker is None else self._masker(text)

    def argv(self, args: Iterable[str]) -> list[str]:
        """Each argument masked, before anything quotes or joins them."""
        return [self(arg) for arg in args]

    def command_line(self, args: Iterable[str]) -> str:
        """An argv as a shell reads it, each argument masked before it is quoted."""
        return shlex.join(self.argv(args))

    def structure(self, value: Any) -> Any:
        """``value`` (JSON-like: dicts, lists, tuples, strings) with every string masked, before it is
        dumped; keys are names and stay."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.structure(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.structure(item) for item in value)
        if isinstance(value, dict):
            return {key: self.structure(item) for key, item in value.items()}
        return value


@dataclass(frozen=True)
class CommandLine:
    """An argv to log: printed as a shell reads it. RedactingFilter masks each argument before joining."""

    args: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.args)


class RedactingFilter(logging.Filter):
    """Masks secrets in every record a handler emits: its arguments one by one before they are
    formatted (a ``%r`` or a joined command line cannot re-quote a secret past the mask), then the
    formatted message, the traceback and the stack. The secrets are learnt once the job is read."""

    def __init__(self) -> None:
        super().__init__()
        self.redactor = Redactor()

    def _argument(self, value: Any) -> Any:
        if isinstance(value, CommandLine):
            return CommandLine(tuple(self.redactor.argv(value.args)))
        if isinstance(value, str | list | tuple | dict):
            return self.redactor.structure(value)
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        redact = self.redactor
        if isinstance(record.args, Mapping):
            record.args = {key: self._argument(value) for key, value in record.args.items()}
        elif record.args:
            record.args = tuple(self._argument(value) for value in record.args)
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
