"""``python -m kafkasync_source.driver.autostop show|reset``: inspect or clear the durable
Trigger.AvailableNow stop offsets of a query (see :mod:`kafkasync_source.driver.stop_offset_store`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from kafkasync_source.driver.stop_offset_store import read_stop_offsets, reset_stop_offsets

__all__ = ["read_stop_offsets", "reset_stop_offsets"]


def _main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafkasync_source.driver.autostop",
        description="Show or reset the durable Trigger.AvailableNow stop offsets of a kafkasync query.",
    )
    parser.add_argument("command", choices=("show", "reset"))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--key", required=True, help="the query's autostop.key")
    parser.add_argument("--topic", help="the query's autostop.topic, if set")
    parser.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE",
        help="further source options, e.g. kafka.security.protocol=SASL_SSL (repeatable)",
    )
    args = parser.parse_args(argv)
    options = {"kafka.bootstrap.servers": args.bootstrap_servers, "autostop.key": args.key,
               "subscribe": "-"}  # the subscription is irrelevant to the store
    if args.topic:
        options["autostop.topic"] = args.topic
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--option needs NAME=VALUE, got {item!r}")
        options[name] = value
    target = (reset_stop_offsets if args.command == "reset" else read_stop_offsets)(options)
    if target is None:
        print(f"no stored stop offsets for autostop.key={args.key!r}")
    else:
        print(json.dumps(json.loads(target.to_bytes()), indent=2))
        if args.command == "reset":
            print(f"reset: the next run of autostop.key={args.key!r} captures new stop offsets")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
