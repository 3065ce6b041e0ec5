"""MkDocs hook: the configuration reference in ``docs/configuration.md``, generated from the code.

``on_page_markdown`` replaces the line ``<!-- generated: configuration reference -->`` with
``reference_markdown()``: every ``amqp_broker.config.Config`` field (its TOML key, flag, environment
variable ``AMQP_BROKER_<KEY>``, type, default and description), the keys of a ``[[users]]`` table,
the flags that are not settings (``--config``, ``--version``, ``--help``) and each subcommand's
``--help`` text (``amqp_broker.__main__``). A description is the flag's argparse help plus
``config.FIELD_HELP``; a field with neither raises ``MissingDescription`` and fails the build, so
the reference never needs a hand edit and a new setting cannot be left out. Settings added to
``Config`` and ``build_parser`` show up by themselves. Source: MkDocs "Hooks" (mkdocs.yml
``hooks:``, event ``on_page_markdown``), issue 22.
"""

from __future__ import annotations

import argparse
import html
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from amqp_broker import __main__ as cli
from amqp_broker import config as cfg
from amqp_broker.core.settings import User

MARKER = "<!-- generated: configuration reference -->"
#: argparse's help is wrapped to this many columns in the subcommands' blocks
HELP_COLUMNS = 96
_TYPE_NAMES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
#: a flag's metavar that names the value's unit
_UNITS = {"SECONDS": "seconds", "BYTES": "bytes", "PORT": "TCP port"}


class MissingDescription(ValueError):
    """A ``Config`` field (or a ``[[users]]`` key) has no description: no flag with help and no
    ``config.FIELD_HELP`` entry (or no ``config.USER_KEY_HELP`` entry); the message names it."""


@dataclass(frozen=True)
class Setting:
    """One setting of the reference: ``key`` (TOML), ``flag`` (Markdown, e.g. "`--port PORT`",
    "" for none), ``env`` (AMQP_BROKER_<KEY>), ``type`` and ``default`` (Markdown),
    ``description`` (plain text) and ``group`` (the flag's argparse group title)."""

    key: str
    flag: str
    env: str
    type: str
    default: str
    description: str
    group: str


def _md(text: str) -> str:
    """``text`` as literal Markdown: HTML's specials escaped, emphasis/code/link marks too."""
    return re.sub(r"([\\`*_\[\]])", r"\\\1", html.escape(text, quote=False))


def _flag_text(action: argparse.Action) -> str:
    """"--port PORT", "--log-level {debug,info}", "--management-tls" (a switch)."""
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        return flag
    if action.choices:
        return f"{flag} {{{','.join(map(str, action.choices))}}}"
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return f"{flag} {metavar}"


def _flag_markdown(action: argparse.Action) -> str:
    """The flag as code, "(repeatable)" after it for an appending flag."""
    repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return f"`{_flag_text(action)}`{repeat}"


def _default_text(f: Field[Any], default_text: Mapping[str, str],
                  derived: Mapping[str, tuple[int, str]]) -> str:
    """How the reference shows ``f``'s default (TOML syntax for a literal)."""
    if f.name in default_text:
        return _md(default_text[f.name])
    if f.name in derived:
        offset = derived[f.name][0]
        return f"`port` + {offset} ({5672 + offset} for 5672; see its description)"
    if f.default is MISSING:
        raise MissingDescription(f"{f.name}: its default is computed (default_factory); give "
                                 f"config.DEFAULT_TEXT[{f.name!r}] the text to show")
    value = f.default
    if value == "":
        return "unset"
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, str):
        value = f'"{value}"'
    return f"`{value}`"


def settings(config_cls: type = cfg.Config,
             parser: argparse.ArgumentParser | None = None,
             field_help: Mapping[str, str] | None = None) -> list[Setting]:
    """Every field of ``config_cls`` but ``users``, in field order, described from ``parser``'s
    actions (default ``cli.run_parser()``) and ``field_help`` (default ``config.FIELD_HELP``).
    Raises ``MissingDescription`` naming a field that has no description, or whose computed
    default has no ``config.DEFAULT_TEXT``."""
    parser = parser if parser is not None else cli.run_parser()
    field_help = cfg.FIELD_HELP if field_help is None else field_help
    derived: Mapping[str, tuple[int, str]] = getattr(cfg, "DERIVED_PORTS", {})
    actions: dict[str, tuple[argparse.Action | None, str]] = {}
    for arg_group in parser._action_groups:
        title = arg_group.title
        title = "Broker" if not title or title in ("options", "optional arguments") else title
        for arg in arg_group._group_actions:
            actions[cfg.FLAG_FIELDS.get(arg.dest, arg.dest)] = (arg, title)
    out = []
    for f in fields(config_cls):
        if f.name == "users":
            continue
        action, group = actions.get(f.name, (None, "Without a flag"))
        parts = [action.help if action is not None else None, field_help.get(f.name)]
        description = "; ".join(p for p in parts if p and p != argparse.SUPPRESS)
        if not description:
            raise MissingDescription(
                f"configuration key {f.name!r} has no description: give its flag a help text "
                f"(amqp_broker/config.py build_parser) or add it to config.FIELD_HELP")
        annotation = str(f.type).replace(" | None", "")
        type_text = _md(_TYPE_NAMES.get(annotation, annotation))
        if action is not None and action.choices:
            type_text += ", one of " + ", ".join(f"`{c}`" for c in action.choices)
        elif action is not None and action.metavar in _UNITS:
            type_text += f", {_UNITS[str(action.metavar)]}"
        out.append(Setting(key=f.name, flag=_flag_markdown(action) if action is not None else "",
                           env=f"AMQP_BROKER_{f.name.upper()}", type=type_text,
                           default=_default_text(f, cfg.DEFAULT_TEXT, derived),
                           description=description, group=group))
    return out


def _other_flags(parser: argparse.ArgumentParser, keys: set[str]) -> Iterator[str]:
    """Markdown list items for the flags that set no ``Config`` field."""
    for action in parser._actions:
        if cfg.FLAG_FIELDS.get(action.dest, action.dest) not in keys:
            yield f"- {_flag_markdown(action)}: {_md(action.help or '')}"


def _settings_markdown(rows: list[Setting]) -> Iterator[str]:
    yield "## Settings"
    yield ""
    yield "| TOML key | flag | environment variable | default |"
    yield "|---|---|---|---|"
    for r in rows:
        flag = r.flag.split(" ")[0] + ("`" if " " in r.flag else "") if r.flag else "none"
        yield f"| [`{r.key}`](#{r.key}) | {flag} | `{r.env}` | {r.default} |"
    for group in dict.fromkeys(r.group for r in rows):
        yield ""
        yield f"### {_md(group)}"
        for r in (r for r in rows if r.group == group):
            yield ""
            yield f"#### `{r.key}` {{#{r.key}}}"
            yield ""
            yield _md(r.description[:1].upper() + r.description[1:]) + "."
            yield ""
            yield f"- flag: {r.flag}" if r.flag else "- flag: none (TOML or environment only)"
            yield f"- environment: `{r.env}`"
            yield f"- type: {r.type}"
            yield f"- default: {r.default}"


def _users_markdown(user_help: Mapping[str, str]) -> Iterator[str]:
    yield "## Users"
    yield ""
    about = cfg.FIELD_HELP.get("users", "")
    yield (_md(about[:1].upper() + about[1:]) + ". " if about else "") + (
        "Each `[[users]]` table of the TOML file is one account, with these keys:")
    yield ""
    yield "| key | meaning |"
    yield "|---|---|"
    for f in fields(User):
        if f.name not in user_help:
            raise MissingDescription(f"[[users]] key {f.name!r} has no description: add it to "
                                     f"config.USER_KEY_HELP")
        yield f"| `{f.name}` | {_md(user_help[f.name])} |"
    yield ""
    yield "```toml"
    yield "[[users]]"
    yield 'name = "app"'
    yield 'password = "secret"'
    yield 'vhosts = ["/"]'
    yield "```"


def _help_text(parser: argparse.ArgumentParser) -> str:
    """``parser``'s ``--help`` at ``HELP_COLUMNS`` columns, and its sub-parsers' after it."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        texts = [parser.format_help()]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                texts += [sub.format_help() for sub in dict.fromkeys(action.choices.values())]
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(t.rstrip() + "\n" for t in texts)


def _subcommands_markdown() -> Iterator[str]:
    yield "## Subcommands"
    yield ""
    yield ("`amqp-broker SUBCOMMAND ...` runs an operator command instead of a broker; "
           "`amqp-broker --help` lists them:")
    yield ""
    yield "```text"
    yield cli.EPILOG.rstrip()
    yield "```"
    for name in cli.SUBCOMMANDS:
        if name == "help":
            continue
        yield ""
        yield f"### {name}"
        yield ""
        yield f"`amqp-broker {name}`: {_md(cli.SUMMARIES[name])}."
        yield ""
        yield "```text"
        yield _help_text(cli.subcommand_parser(name)).rstrip()
        yield "```"


def reference_markdown(config_cls: type = cfg.Config) -> str:
    """The generated part of ``docs/configuration.md`` (Markdown). Raises ``MissingDescription``
    (see ``settings``)."""
    parser = cli.run_parser()
    rows = settings(config_cls, parser)
    lines = [*_settings_markdown(rows), ""]
    lines += ["## Other flags", ""]
    lines += _other_flags(parser, {r.key for r in rows})
    lines += ["", *_users_markdown(cfg.USER_KEY_HELP), "", *_subcommands_markdown()]
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: put the reference where the marker line is (pages without it unchanged)."""
    if MARKER not in markdown:
        return markdown
    from mkdocs.exceptions import PluginError
    try:
        return markdown.replace(MARKER, reference_markdown())
    except MissingDescription as exc:
        raise PluginError(f"{page.file.src_path}: {exc}") from exc
