"""Parsing of JAAS configuration text as Kafka accepts it in `sasl.jaas.config`.

Form: `<LoginModuleClass> <flag> [key=value ...];` repeated. Values are bare words or
double-quoted strings with backslash escapes. Kafka requires exactly one module per mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """The JAAS text is not well formed; the message says where."""


@dataclass(slots=True)
class LoginModule:
    """One `LoginModule flag options;` entry."""

    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, value) tokens: kind is 'word', 'str', '=' or ';'."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise JaasError("unterminated quoted value")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                    continue
                if c == '"':
                    i += 1
                    break
                buf.append(c)
                i += 1
            out.append(("str", "".join(buf)))
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            out.append(("word", text[i:j]))
            i = j
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    """Parse the modules of a `sasl.jaas.config` value; raises JaasError."""
    toks = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(toks):
        if toks[i][0] != "word":
            raise JaasError(f"expected a login module class name, found {toks[i][1]!r}")
        class_name = toks[i][1]
        if i + 1 >= len(toks) or toks[i + 1][0] != "word" or toks[i + 1][1].lower() not in _FLAGS:
            raise JaasError(f"login module {class_name} must be followed by one of {', '.join(_FLAGS)}")
        module = LoginModule(class_name, toks[i + 1][1].lower())
        i += 2
        while True:
            if i >= len(toks):
                raise JaasError(f"login module {class_name} is not terminated by ';'")
            if toks[i][0] == ";":
                i += 1
                break
            if (toks[i][0] not in ("word", "str") or i + 2 >= len(toks) or toks[i + 1][0] != "="
                    or toks[i + 2][0] not in ("word", "str")):
                raise JaasError(f"expected key=value in the options of {class_name}")
            module.options[toks[i][1]] = toks[i + 2][1]
            i += 3
        modules.append(module)
    if not modules:
        raise JaasError("no login module")
    return modules


def single_module(text: str) -> LoginModule:
    """The one login module Kafka allows in a `sasl.jaas.config` value."""
    modules = parse_jaas_config(text)
    if len(modules) != 1:
        raise JaasError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]
