"""A small shell client on top of `client.py`: register an identity and message another one.

    python -m apps.wire.cli new-identity --alias alice --mediator http://localhost:8000 --out alice.json
    python -m apps.wire.cli register --identity alice.json
    python -m apps.wire.cli request-contract --identity alice.json --to <bob's DID>
    python -m apps.wire.cli accept-requests --identity bob.json
    python -m apps.wire.cli contracts --identity alice.json
    python -m apps.wire.cli send --identity alice.json --to <bob's DID> --text "hello bob"
    python -m apps.wire.cli inbox --identity bob.json --ack

The identity file holds private keys: it is written with mode 0600 and never printed. Another
party's mediator is found from the mediator segment of its DID: a `did:web:<host>` mediator is
reached at `https://<host>` (`--scheme http` for local development), or at an explicit
`--mediator-url`. Pure Python: no Django imports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .client import DAY_S, Identity, MediatorClient, MediatorDirectory, MediatorError
from .did import DidError, parse_decentrl
from .display import utc_iso

MAX_IDENTITY_FILE = 16 * 1024 * 1024
PAGE_SIZE = 100
MAX_PAGES = 1000  # 100 000 items: far above any tenant's queue cap


class CliError(Exception):
    """A user-facing failure: printed as `error: ...` with an exit status."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


# -- identity files -----------------------------------------------------------------------------


def load_identity(path: Path) -> tuple[Identity, dict[str, Any]]:
    """Read an identity file; returns the identity and the whole JSON (for the CLI's own members)."""
    try:
        if path.stat().st_size > MAX_IDENTITY_FILE:
            raise CliError(f"{path} is too large to be an identity file", 2)
        data = json.loads(path.read_text(encoding="utf-8"))
        ident = Identity.from_json(data)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", 2) from exc
    except ValueError as exc:  # JSON errors are ValueErrors too
        raise CliError(f"{path} is not an identity file ({exc})", 2) from exc
    if not isinstance(data.get("mediator_url"), str):
        raise CliError(f"{path} has no mediator_url", 2)
    return ident, data


def save_identity(path: Path, ident: Identity, mediator_url: str, *, exclusive: bool = False) -> None:
    """Write the identity atomically with mode 0600 (it holds private keys)."""
    data = {**ident.to_json(), "mediator_url": mediator_url}
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    path = path.resolve()
    if exclusive and path.exists():
        raise CliError(f"{path} already exists (use --force to overwrite it)", 2)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp creates it 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}", 2) from exc


# -- output -------------------------------------------------------------------------------------


def safe(text: str) -> str:
    """Escape control and format characters so that text from others cannot drive the terminal."""
    return "".join(ch if unicodedata.category(ch) not in ("Cc", "Cf", "Cs") else f"\\u{ord(ch):04x}" for ch in text)


def iso(ts_s: int) -> str:
    """Unix seconds as an ISO 8601 UTC timestamp (the one format of apps/wire/display.py)."""
    return utc_iso(ts_s)


def who(did: str) -> str:
    """`alias (did)` for a did:decentrl (the alias is public metadata), else the DID; escaped for printing."""
    try:
        alias = parse_decentrl(did).alias
    except DidError:
        return safe(did)
    return f"{safe(alias or '')} ({safe(did)})"


def message_text(event: Any) -> str:
    """What to show for a received event: the content of a chat message, else its JSON."""
    if isinstance(event, dict) and event.get("type") == "chat.message":
        data = event.get("data")
        if isinstance(data, dict) and isinstance(data.get("content"), str):
            return str(data["content"])
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


# -- commands -----------------------------------------------------------------------------------


class Session:
    """The identity, its file, its own mediator and a directory for reaching other mediators."""

    def __init__(self, args: argparse.Namespace):
        self.path = Path(args.identity)
        self.ident, data = load_identity(self.path)
        self.mediator_url: str = data["mediator_url"]
        self.directory = MediatorDirectory(scheme=args.scheme, timeout=args.timeout)
        self.own = MediatorClient(self.mediator_url, timeout=args.timeout, directory=self.directory)
        if self.own.did != self.ident.mediator_did:
            raise CliError(f"{self.mediator_url} serves {self.own.did}, not this identity's {self.ident.mediator_did}")
        for url in args.mediator_url or []:
            MediatorClient(url, timeout=args.timeout, directory=self.directory)

    def save(self) -> None:
        save_identity(self.path, self.ident, self.mediator_url)

    def mediator_of(self, did: str) -> MediatorClient:
        """The mediator that hosts `did`."""
        try:
            return self.directory.client_for(did)
        except DidError as exc:
            raise CliError(f"cannot reach the mediator of {did}: {exc}") from exc

    def close(self) -> None:
        self.directory.close()


def cmd_new_identity(args: argparse.Namespace) -> None:
    url = args.mediator.rstrip("/")
    mediator = MediatorClient(url, timeout=args.timeout)
    try:
        mediator_did = mediator.did
    finally:
        mediator.close()
    ident = Identity.create(args.alias, mediator_did)
    save_identity(Path(args.out), ident, url, exclusive=not args.force)
    print(ident.did)


def cmd_register(s: Session, args: argparse.Namespace) -> None:
    signed = s.own.register(s.ident, lifetime_s=args.days * DAY_S)
    s.save()
    until = signed["communication_contract"]["expires_at"]
    print(f"registered with {s.own.did} until {iso(until)}")


def cmd_request_contract(s: Session, args: argparse.Namespace) -> None:
    try:
        parse_decentrl(args.to)
    except DidError as exc:
        raise CliError(f"--to is not a did:decentrl ({exc})", 2) from exc
    s.mediator_of(args.to).request_contract(s.ident, args.to, lifetime_s=args.days * DAY_S)
    s.save()
    print(f"requested a contract with {who(args.to)}")


def _all_pages(fetch: Callable[[int], dict[str, Any]], key: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in range(MAX_PAGES):
        reply = fetch(page)
        items.extend(reply[key])
        if (page + 1) * PAGE_SIZE >= reply["pagination"]["total"] or not reply[key]:
            break
    return items


def cmd_accept_requests(s: Session, args: argparse.Namespace) -> None:
    items = _all_pages(
        lambda page: s.own.pending_contract_requests(s.ident, page=page, page_size=PAGE_SIZE),
        "pending_communication_contract_requests",
    )
    accepted = failed = 0
    for item in items:
        sender = str(item.get("sender_did", "?"))
        try:
            s.own.accept_contract_request(s.ident, item)
        except MediatorError as exc:
            # Not acknowledged: the request stays pending and the next run tries again.
            failed += 1
            print(f"could not accept the request from {safe(sender)}: {exc.status} {exc.code}", file=sys.stderr)
            continue
        except httpx.HTTPError as exc:
            failed += 1
            print(f"could not accept the request from {safe(sender)}: {type(exc).__name__}", file=sys.stderr)
            continue
        except (ValueError, KeyError, TypeError, DidError) as exc:
            # It does not decrypt, verify or name us: it never will, so drop it instead of seeing it again.
            print(f"dropped an invalid request from {safe(sender)}: {safe(str(exc))}", file=sys.stderr)
            if isinstance(item.get("id"), str):
                s.own.command(
                    s.ident,
                    {
                        "type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
                        "communication_contract_ids": [item["id"]],
                    },
                )
            continue
        finally:
            s.save()  # keep every contract accepted so far, whatever happens next
        accepted += 1
        print(f"accepted a contract with {who(sender)}")
    if not items:
        print("no pending contract requests")
    if failed:
        raise CliError(f"{failed} contract request(s) not accepted")


def cmd_contracts(s: Session, args: argparse.Namespace) -> None:
    for signed in s.own.pick_up_contracts(s.ident):
        other = signed["communication_contract"]["recipient_did"]
        print(f"adopted a contract with {who(other)}")
    s.save()
    held = sorted(
        (signed["communication_contract"] for signed, _ in s.ident.contracts.values()),
        key=lambda t: (t["expires_at"], t["requestor_did"], t["recipient_did"]),
    )
    for t in held:
        other = t["recipient_did"] if t["requestor_did"] == s.ident.did else t["requestor_did"]
        print(f"contract with {who(other)} until {iso(t['expires_at'])}")
    if s.ident.requested:
        print(f"{len(s.ident.requested)} requested contract(s) not accepted yet")


def cmd_send(s: Session, args: argparse.Namespace) -> None:
    if s.ident.contract_with(args.to) is None:
        raise CliError(f"no live contract with {args.to}: request-contract first, then contracts once it is accepted")
    event = {"type": "chat.message", "data": {"content": args.text}}
    event_id = s.mediator_of(args.to).send_private(s.ident, args.to, event)
    print(f"sent {event_id}")


def cmd_inbox(s: Session, args: argparse.Namespace) -> None:
    items = _all_pages(lambda page: s.own.pending_events(s.ident, page=page, page_size=PAGE_SIZE), "pending_events")
    opened: list[str] = []
    for item in items:
        sender = str(item.get("sender_did", "?"))
        try:
            event = s.own.decrypt_private(s.ident, sender, item["payload"])
        except (ValueError, KeyError, TypeError, DidError) as exc:
            print(f"{safe(sender)}: cannot open this message ({safe(str(exc))})")
            continue
        opened.append(item["id"])
        print(f"{who(sender)}: {safe(message_text(event['event']))}")
    if not items:
        print("no pending messages")
    if args.ack and opened:
        for i in range(0, len(opened), PAGE_SIZE):  # an ACK carries at most 1000 ids (envelope cap)
            s.own.ack_events(s.ident, opened[i : i + PAGE_SIZE])
        print(f"acknowledged {len(opened)} message(s)")


SESSION_COMMANDS: dict[str, Callable[[Session, argparse.Namespace], None]] = {
    "register": cmd_register,
    "request-contract": cmd_request_contract,
    "accept-requests": cmd_accept_requests,
    "contracts": cmd_contracts,
    "send": cmd_send,
    "inbox": cmd_inbox,
}


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout in seconds (default 10)")
    common.add_argument(
        "--scheme",
        choices=("https", "http"),
        default="https",
        help="scheme for reaching another did:web mediator at its host (default https; http for local development)",
    )
    common.add_argument(
        "--mediator-url",
        action="append",
        metavar="URL",
        help="reach the mediator served at URL here instead of at https://<host> (repeatable)",
    )
    with_identity = argparse.ArgumentParser(add_help=False, parents=[common])
    with_identity.add_argument("--identity", required=True, metavar="FILE", help="identity file (JSON, mode 0600)")

    parser = argparse.ArgumentParser(prog="python -m apps.wire.cli", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("new-identity", parents=[common], help="create keys and save a new identity file")
    p.add_argument("--alias", required=True)
    p.add_argument("--mediator", required=True, metavar="URL", help="base URL of the identity's mediator")
    p.add_argument("--out", required=True, metavar="FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")

    p = sub.add_parser("register", parents=[with_identity], help="register the identity with its mediator")
    p.add_argument("--days", type=int, default=30, help="registration lifetime in days (default 30)")
    p = sub.add_parser("request-contract", parents=[with_identity], help="ask another identity for a contract")
    p.add_argument("--to", required=True, metavar="DID")
    p.add_argument("--days", type=int, default=7, help="contract lifetime in days (default 7)")
    sub.add_parser("accept-requests", parents=[with_identity], help="accept every pending contract request")
    sub.add_parser("contracts", parents=[with_identity], help="pick up accepted contracts and list those held")
    p = sub.add_parser("send", parents=[with_identity], help="send an encrypted text message")
    p.add_argument("--to", required=True, metavar="DID")
    p.add_argument("--text", required=True)
    p = sub.add_parser("inbox", parents=[with_identity], help="decrypt and print pending messages")
    p.add_argument("--ack", action="store_true", help="acknowledge what was printed (the mediator deletes it)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 mediator or network failure, 2 usage or file)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "days", 1) < 1:
        print("error: --days must be at least 1", file=sys.stderr)
        return 2
    session: Session | None = None
    try:
        if args.command == "new-identity":
            cmd_new_identity(args)
        else:
            session = Session(args)
            SESSION_COMMANDS[args.command](session, args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    except MediatorError as exc:
        print(f"error: the mediator replied {exc.status} {exc.code}", file=sys.stderr)
        return 1
    except (httpx.HTTPError, DidError, ValueError) as exc:
        print(f"error: {type(exc).__name__}: {safe(str(exc))}", file=sys.stderr)
        return 1
    finally:
        if session is not None:
            session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
