"""Which package indexes pip would contact to install the user's requirements, and whether this host can
reach them: found out before pip runs, so that a job with no route to its index (network isolation, a VPC
subnet without a NAT gateway) is told so in seconds, instead of after pip's retries.

The index URLs are worked out as pip works them out, from the same sources in the same order: pip's
configuration files ([global], then [install]; global, user, site files, then PIP_CONFIG_FILE), its
``PIP_*`` environment variables, then the requirements file's own option lines (``-i``/``--index-url``,
``--extra-index-url``, ``--no-index``; ``-r``/``-c`` files included in place). A probe is one TCP
connection to each index's host (or to the proxy pip would go through), name resolution included, bounded
by one deadline. Nothing here parses pip's output.
"""

from __future__ import annotations

import configparser
import os
import queue
import re
import shlex
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sagetrain.deadline import Deadline

PYPI = "https://pypi.org/simple"
# pip's own spelling of ${NAME} in requirements files: upper-case letters, digits and underscores only.
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")
_COMMENT = re.compile(r"(^|\s+)#.*$")
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s/@]+@")
# The requirement-file options that take a value (pip's own list); the others are flags.
_VALUE_OPTIONS = {
    "-i": "index-url", "--index-url": "index-url",
    "--extra-index-url": "extra-index-url",
    "-f": "find-links", "--find-links": "find-links",
    "-r": "requirement", "--requirement": "requirement",
    "-c": "constraint", "--constraint": "constraint",
    "-e": "editable", "--editable": "editable",
    "--trusted-host": "trusted-host", "--use-feature": "use-feature",
    "--no-binary": "no-binary", "--only-binary": "only-binary",
    "--hash": "hash", "--global-option": "global-option", "--install-option": "install-option",
    "--config-settings": "config-settings",
}  # fmt: skip
_ARCHIVES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
# pip reads included files recursively; a circle of them is pip's error to report, not a hang here.
MAX_INCLUDE_DEPTH = 20


def without_credentials(text: str) -> str:
    """``text`` with the user part of every URL in it masked (an index URL may carry a token)."""
    return _USERINFO.sub(r"\1***@", text)


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "y", "yes", "t", "true", "on")


@dataclass(frozen=True)
class PipSettings:
    """What pip's configuration (its files and PIP_* variables) says about indexes."""

    index_url: str = PYPI
    extra_index_urls: tuple[str, ...] = ()
    no_index: bool = False
    proxy: str = ""


def pip_config_files(environ: Mapping[str, str], home: Path, prefix: Path) -> tuple[Path, ...]:
    """The configuration files pip reads, in the order a later one overrides an earlier one (pip's
    ``Configuration``): global (``$XDG_CONFIG_DIRS/pip``, ``/etc``), user (unless PIP_CONFIG_FILE names a
    file that exists), site (the environment's prefix), then PIP_CONFIG_FILE. ``os.devnull`` there: none."""
    named = environ.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return ()
    config_dirs = (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    files = [Path(folder) / "pip" / "pip.conf" for folder in config_dirs if folder]
    files.append(Path("/etc/pip.conf"))
    if not (named and Path(named).exists()):
        files.append(home / ".pip" / "pip.conf")
        files.append(Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(prefix / "pip.conf")
    if named:
        files.append(Path(named))
    return tuple(files)


def _config_items(texts: Sequence[str]) -> dict[str, dict[str, str]]:
    """{section: {option: value}} of config file texts, a later file overriding an earlier one."""
    merged: dict[str, dict[str, str]] = {}
    for text in texts:
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(text)
        except configparser.Error:
            continue  # pip stops on it and says so
        for section in parser.sections():
            options = merged.setdefault(section, {})
            for name, value in parser.items(section):
                options[name.lower().replace("_", "-")] = value
    return merged


def pip_settings(config_texts: Sequence[str], environ: Mapping[str, str]) -> PipSettings:
    """The index settings pip's ``install`` would start from: config file texts (in override order) read
    [global] first and [install] over it, then the PIP_* variables over both; empty values are ignored,
    as pip ignores them. Pure."""
    sections = _config_items(config_texts)
    variables = {
        name[4:].lower().replace("_", "-"): value
        for name, value in environ.items()
        if name.startswith("PIP_")
    }
    found: dict[str, str] = {}
    for options in (sections.get("global", {}), sections.get("install", {}), variables):
        found.update({name: value for name, value in options.items() if value})
    return PipSettings(
        index_url=found.get("index-url", PYPI),
        extra_index_urls=tuple(found.get("extra-index-url", "").split()),
        no_index=_true(found.get("no-index", "")),
        proxy=found.get("proxy", ""),
    )


def read_pip_settings(environ: Mapping[str, str], home: Path, prefix: Path) -> PipSettings:
    texts = []
    for path in pip_config_files(environ, home, prefix):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue  # missing, as most are
    return pip_settings(texts, environ)


@dataclass(frozen=True)
class FileLine:
    """One logical line of a requirements file: an option (``name`` as pip spells it long, and its value)
    or a requirement (``name`` empty)."""

    name: str
    value: str


def logical_lines(text: str, environ: Mapping[str, str]) -> list[str]:
    """A requirements file's lines as pip reads them: a trailing backslash joins the next line, comments
    go, ``${NAME}`` is replaced by the variable's value when it has one. Pure."""
    joined: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if raw.endswith("\\") and not _COMMENT.match(raw):
            pending += raw[:-1]
            continue
        joined.append(pending + raw)
        pending = ""
    if pending:
        joined.append(pending)
    lines = []
    for line in joined:
        line = _COMMENT.sub("", line).strip()
        line = _ENV_VAR.sub(lambda match: environ.get(match.group(1)) or match.group(0), line)
        if line:
            lines.append(line)
    return lines


def _options(words: list[str]) -> list[FileLine]:
    found = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        spelled, equals, attached = word.partition("=")
        if word.startswith("--") and spelled in _VALUE_OPTIONS and equals:
            found.append(FileLine(_VALUE_OPTIONS[spelled], attached))
        elif word in _VALUE_OPTIONS and index < len(words):
            found.append(FileLine(_VALUE_OPTIONS[word], words[index]))
            index += 1
        elif len(word) > 2 and not word.startswith("--") and word[:2] in _VALUE_OPTIONS:
            found.append(FileLine(_VALUE_OPTIONS[word[:2]], word[2:]))  # -iURL, as optparse reads it
        elif word.startswith("--"):
            found.append(FileLine(word[2:], ""))  # a flag: --no-index, --pre
    return found


def parse_line(line: str) -> list[FileLine]:
    """A logical line's options, or its requirement (what comes before its own options). Pure."""
    if not line.startswith("-"):
        requirement = re.split(r"\s+-", line, maxsplit=1)[0].strip()
        return [FileLine("", requirement)]
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    return _options(words)


def is_local(requirement: str) -> bool:
    """Whether a requirement names a file or folder here (a wheel shipped in the code folder, a source
    tree), which pip reads without an index; a name, or a URL, needs the network. Pure."""
    text = requirement.split(";", 1)[0].strip()
    name, at, reference = text.partition("@")
    if at and not name.strip().startswith((".", "/", "~")) and "://" in reference:
        return reference.strip().startswith("file:")
    if text.startswith("file:"):
        return True
    if "://" in text or re.match(r"^(git|hg|svn|bzr)\+", text):
        return False
    return text.startswith((".", "/", "~")) or "/" in text or text.endswith(_ARCHIVES)


@dataclass(frozen=True)
class Requirements:
    """What a requirements file (and the files it includes) asks for: its option lines in order, and
    whether every requirement is a local file or folder. ``complete``: every included file was read."""

    options: tuple[FileLine, ...] = ()
    requirements: tuple[str, ...] = ()
    complete: bool = True

    @property
    def local_only(self) -> bool:
        return self.complete and all(map(is_local, self.requirements))


def read_requirements(path: Path, environ: Mapping[str, str], depth: int = 0) -> Requirements:
    """The requirements file at ``path``, with the files its ``-r``/``-c`` lines include read in place
    (relative to the including file, as pip reads them); a constraints file's lines are options only."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return Requirements(complete=False)  # pip says what is wrong with it
    options: list[FileLine] = []
    requirements: list[str] = []
    complete = True
    for line in logical_lines(text, environ):
        for item in parse_line(line):
            if item.name in ("requirement", "constraint"):
                if depth >= MAX_INCLUDE_DEPTH:
                    complete = False
                    continue
                included = read_requirements(path.parent / item.value, environ, depth + 1)
                options += included.options
                requirements += included.requirements if item.name == "requirement" else ()
                complete = complete and included.complete
            elif item.name in ("", "editable"):
                requirements.append(item.value)
            else:
                options.append(item)
    return Requirements(tuple(options), tuple(requirements), complete)


def index_urls(settings: PipSettings, lines: Iterable[FileLine] = ()) -> tuple[str, ...]:
    """The indexes pip would look in, the index URL first: pip's settings, changed by a requirements
    file's option lines in order as pip changes them (``--no-index`` ends every index; ``-i`` replaces the
    list until then, ``--extra-index-url`` adds to it). Empty: no index. Pure."""
    no_index = settings.no_index
    urls = [] if no_index else [settings.index_url, *settings.extra_index_urls]
    for line in lines:
        if line.name == "no-index":
            no_index, urls = True, []
        elif line.name == "index-url" and not no_index:
            urls = [line.value]
        elif line.name == "extra-index-url" and not no_index:
            urls.append(line.value)
    return tuple(dict.fromkeys(urls))


@dataclass(frozen=True)
class Endpoint:
    """Where a connection to an index goes: its host, or the proxy's."""

    host: str
    port: int
    proxy: str = ""  # the proxy's URL, when the connection goes through one


def _bypassed(host: str, no_proxy: str) -> bool:
    for entry in (item.strip().lower() for item in no_proxy.split(",")):
        if entry == "*" or (entry and (host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")))):
            return True
    return False


def _host_port(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url if "://" in url else "http://" + url)
    try:
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.scheme not in ("http", "https"):
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def endpoint(url: str, settings: PipSettings, environ: Mapping[str, str]) -> Endpoint | None:
    """Where pip's connection to the index at ``url`` goes: pip's own proxy setting, else the proxy the
    environment names for its scheme (requests' rule, ``no_proxy`` honoured), else the index's host.
    None: not a network index (a local folder, ``file:``) or not a URL at all (pip says so). Pure."""
    target = _host_port(url)
    if target is None:
        return None
    scheme = urlsplit(url).scheme
    proxy = settings.proxy
    if not proxy:
        candidates = (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY")
        proxy = next((environ[name] for name in candidates if environ.get(name)), "")
        no_proxy = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
        if proxy and _bypassed(target[0].lower(), no_proxy):
            proxy = ""
    if proxy:
        through = _host_port(proxy)
        return Endpoint(*through, proxy=proxy) if through else None
    return Endpoint(*target)


def _resolve(host: str, port: int, deadline: Deadline) -> list[tuple[int, tuple[str, int]]] | str:
    """The addresses of ``host``, or why there are none: getaddrinfo in a thread of its own, because it
    takes no timeout and a resolver that does not answer would otherwise hold the job."""
    answer: queue.Queue[list[tuple[int, tuple[str, int]]] | str] = queue.Queue(maxsize=1)

    def lookup() -> None:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.put([(family, (str(address[0]), int(address[1]))) for family, _, _, _, address in found])
        except OSError as error:
            answer.put(f"name resolution failed: {error.strerror or error}")

    threading.Thread(target=lookup, name="index-name-lookup", daemon=True).start()
    try:
        return answer.get(timeout=deadline.remaining())
    except queue.Empty:
        return f"no answer from the name resolver within {deadline.seconds:g} s"


def probe(target: Endpoint, deadline: Deadline) -> str | None:
    """Why a TCP connection to ``target`` cannot be made before ``deadline``, or None when one was."""
    addresses = _resolve(target.host, target.port, deadline)
    if isinstance(addresses, str):
        return addresses
    why = "no address"
    for family, address in addresses:
        if deadline.expired():
            return f"no connection within {deadline.seconds:g} s"
        try:
            with socket.socket(family, socket.SOCK_STREAM) as connection:
                connection.settimeout(deadline.remaining())
                connection.connect(address)
            return None
        except TimeoutError:
            return f"no connection within {deadline.seconds:g} s"
        except OSError as error:
            why = error.strerror or str(error)
    return why


@dataclass(frozen=True)
class Unreachable:
    """An index this host cannot connect to, and why."""

    url: str
    why: str
    proxy: str = ""

    def describe(self) -> str:
        through = f" through the proxy {without_credentials(self.proxy)}" if self.proxy else ""
        return f"the package index {without_credentials(self.url)} cannot be reached{through} ({self.why})"


def first_unreachable(
    urls: Sequence[str], settings: PipSettings, environ: Mapping[str, str], deadline: Deadline
) -> Unreachable | None:
    """The first of ``urls`` that this host cannot connect to before ``deadline``; None when it can
    reach every one (indexes that are not on the network need no probe)."""
    for url in urls:
        target = endpoint(url, settings, environ)
        if target is None:
            continue
        why = probe(target, deadline)
        if why is not None:
            return Unreachable(url, why, target.proxy)
    return None
