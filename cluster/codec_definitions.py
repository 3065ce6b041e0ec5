"""Cluster methods that carry definitions to every member: Policy (110), Definition (120) and
InVhost (130); their fields and meaning are in the table of ``codec``'s docstring, which also
registers them with pamqp. Must not know: sockets, peer links, the broker core.
"""

from __future__ import annotations

import typing

from .codec_base import CLUSTER_CLASS_ID, ClusterMethod, check_shortstr

__all__ = ["Policy", "Definition", "DEFINITION_KINDS", "InVhost"]


class Policy(ClusterMethod):
    """Cluster.Policy (our addition, issue 12): policy ``policy`` of ``vhost`` is now ``body`` (a
    JSON text; empty: cleared). Sent to every member when a policy changes and replayed to a
    joiner; a member applies it without sending it on."""

    __slots__: typing.ClassVar[list[str]] = ["vhost", "policy", "body"]
    frame_id: typing.ClassVar[int] = 110
    index: typing.ClassVar[int] = (CLUSTER_CLASS_ID << 16) | 110
    name: typing.ClassVar[str] = "Cluster.Policy"
    _vhost = "shortstr"
    _policy = "shortstr"
    _body = "longstr"

    def __init__(self, vhost: str = "/", policy: str = "", body: str = "") -> None:
        self.vhost = vhost
        self.policy = policy
        self.body = body
        self.validate()

    def validate(self) -> None:
        """Raises ``ValueError`` for a bad vhost or name, or a body that is not a str."""
        check_shortstr("vhost", self.vhost)
        check_shortstr("policy", self.policy)
        if not isinstance(self.body, str):
            raise ValueError("body must be a str")


#: ``Definition.kind`` values.
DEFINITION_KINDS = ("user", "permission", "vhost")


class Definition(ClusterMethod):
    """Cluster.Definition (our addition, issue 13): a user, a permission or a vhost is now
    ``body`` (JSON text; empty: deleted), see the module docstring for the keys of each ``kind``.
    Sent to every member when it changes and replayed to a joiner; a member applies it without
    sending it on. Passwords travel as RabbitMQ's salted hashes only."""

    __slots__: typing.ClassVar[list[str]] = ["kind", "vhost", "user", "body"]
    frame_id: typing.ClassVar[int] = 120
    index: typing.ClassVar[int] = (CLUSTER_CLASS_ID << 16) | 120
    name: typing.ClassVar[str] = "Cluster.Definition"
    _kind = "shortstr"
    _vhost = "shortstr"
    _user = "shortstr"
    _body = "longstr"

    def __init__(self, kind: str = "user", vhost: str = "", user: str = "",
                 body: str = "") -> None:
        self.kind = kind
        self.vhost = vhost
        self.user = user
        self.body = body
        self.validate()

    def validate(self) -> None:
        """Raises ``ValueError`` for an unknown kind, a bad vhost or user name, or a body that is
        not a str."""
        if self.kind not in DEFINITION_KINDS:
            raise ValueError(f"kind must be one of {DEFINITION_KINDS}")
        check_shortstr("vhost", self.vhost)
        check_shortstr("user", self.user)
        if not isinstance(self.body, str):
            raise ValueError("body must be a str")


class InVhost(ClusterMethod):
    """Cluster.InVhost (our addition, issue 13): the AMQP method whose frame payload is
    ``payload`` (bytes) applies to vhost ``vhost`` (a peer link opens vhost "/"). Build with
    ``InVhost(vhost, method_payload)``; the receiver decodes ``payload`` as it would a method frame
    and answers as for that method. On the wire ``method`` is a longstr holding the payload's
    bytes as Latin-1 characters in UTF-8 (pamqp encodes only ``str`` longstrs and decodes valid
    UTF-8 to ``str``): lossless for any bytes."""

    __slots__: typing.ClassVar[list[str]] = ["vhost", "method"]
    frame_id: typing.ClassVar[int] = 130
    index: typing.ClassVar[int] = (CLUSTER_CLASS_ID << 16) | 130
    name: typing.ClassVar[str] = "Cluster.InVhost"
    _vhost = "shortstr"
    _method = "longstr"

    def __init__(self, vhost: str = "/", method: str | bytes = "\0\0\0\0") -> None:
        self.vhost = vhost
        self.method: str | bytes = (method.decode("latin-1") if isinstance(method, bytes)
                                    else method)
        self.validate()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, InVhost)
        return self.vhost == other.vhost and self.payload == other.payload

    __hash__ = None  # type: ignore[assignment]

    @property
    def payload(self) -> bytes:
        """The wrapped method frame payload; b"" when ``method`` holds a character above U+00FF
        (not our encoding: decoding b"" then fails as a malformed frame, 502)."""
        if isinstance(self.method, bytes):  # not valid UTF-8 on the wire: not ours either
            return b""
        try:
            return self.method.encode("latin-1")
        except UnicodeEncodeError:
            return b""

    def validate(self) -> None:
        """Raises ``ValueError`` for a bad vhost or a wrapped payload shorter than a method's
        class and method ids (4 bytes)."""
        check_shortstr("vhost", self.vhost)
        if len(self.payload) < 4:
            raise ValueError("method must be a method frame payload of at least 4 bytes")
