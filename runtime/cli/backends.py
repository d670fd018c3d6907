"""``parley backends``: the backend profiles (inference servers) saved in the user's settings.

``parley backends list`` shows them; ``parley backends add NAME URL [--kind ...]`` saves one;
``parley backends remove NAME`` deletes one; ``parley backends check NAME|URL`` contacts the
server and says what it serves. Keys are never saved: ``--api-key-env VAR`` names the variable.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from runtime.files.located import Place
from runtime.problems import BackendError, InputError

if TYPE_CHECKING:
    from runtime.backends.profiles import BackendProfile

ProfilesVerb = Callable[[argparse.Namespace, "list[BackendProfile]"], int]
# A profile's field -> how `parley backends add` takes it.
OPTIONS = {"name": "NAME", "url": "URL", "kind": "--kind", "api_key_env": "--api-key-env", "model": "--model",
           "context_size": "--context-size", "timeout": "--timeout"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backends", help="inference servers to run agents on (backend profiles)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs.add_parser("list", help="the saved profiles and where they are kept").set_defaults(func=list_profiles)
    add = verbs.add_parser("add", help="save a profile (replaces one of the same name)")
    add.add_argument("name")
    add.add_argument("url", help="the server's address, such as http://10.0.0.5:8080")
    add.add_argument("--kind", choices=("llama-server", "openai"), default=None,
                     help="llama-server: llama.cpp's server (a slot per node); openai: any OpenAI-compatible "
                     "server. Default: ask the server")
    add.add_argument("--api-key-env", default="", metavar="VAR", help="the environment variable holding the key")
    add.add_argument("--model", default="", help="openai: the served model's name (default: the only one)")
    add.add_argument("--context-size", type=int, default=0, help="openai: the model's context, if the server "
                     "does not say")
    add.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server's next byte")
    add.set_defaults(func=add_profile)
    rm = verbs.add_parser("remove", help="delete a saved profile")
    rm.add_argument("name")
    rm.set_defaults(func=remove_profile)
    check = verbs.add_parser("check", help="contact a server and say what it serves")
    check.add_argument("backend", metavar="NAME|URL")
    check.set_defaults(func=check_backend)


def _on_saved_profiles(verb: ProfilesVerb) -> Callable[[argparse.Namespace], int]:
    """``verb`` as a command, handed the saved profiles; a profiles file that cannot be read is
    said, and the command exits 2."""

    @functools.wraps(verb)
    def command(args: argparse.Namespace) -> int:
        from runtime.backends.profiles import load_profiles

        try:
            profiles = load_profiles()
        except InputError as exc:
            print(exc, file=sys.stderr)
            return 2
        return verb(args, profiles)

    return command


@_on_saved_profiles
def list_profiles(args: argparse.Namespace, profiles: list[BackendProfile]) -> int:
    from runtime.backends.profiles import profiles_path

    print(f"# {profiles_path()}")
    print("embedded · llama.cpp on this computer (the default)")
    for p in profiles:
        key = f" · key from ${p.api_key_env}" if p.api_key_env else ""
        print(f"{p.description}{key}")
    return 0


@_on_saved_profiles
def add_profile(args: argparse.Namespace, profiles: list[BackendProfile]) -> int:
    from runtime.backends.profiles import BackendProfile, _ask_kind, save_profiles
    from runtime.files.located import located_problems

    values = {"name": args.name, "url": args.url, "api_key_env": args.api_key_env, "model": args.model,
              "context_size": args.context_size, "timeout": args.timeout}
    try:
        BackendProfile(kind="openai", **values)  # every field checked before the server is asked its kind
        kind = args.kind or _ask_kind(args.url)
        profile = BackendProfile(kind=kind, **values)
    except BackendError as exc:
        print(f"parley backends add {args.name}: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        for problem in located_problems(exc, "", lambda err: _option_place(err)):
            print(f"parley backends add: {problem.where.lstrip(':')}: error: {problem.message}", file=sys.stderr)
        return 2
    kept = [p for p in profiles if p.name != profile.name]
    print(f"saved {profile.description} in {save_profiles([*kept, profile])}")
    return 0


def _option_place(err: ErrorDetails) -> Place:
    """Where ``parley backends add``'s error is: the option (``--api-key-env``) or argument (``URL``)."""
    field = str(err["loc"][0]) if err["loc"] else "name"
    return Place(field=OPTIONS.get(field, field))


@_on_saved_profiles
def remove_profile(args: argparse.Namespace, profiles: list[BackendProfile]) -> int:
    from runtime.backends.profiles import save_profiles

    kept = [p for p in profiles if p.name != args.name]
    if len(kept) == len(profiles):
        print(f"no profile named {args.name!r}", file=sys.stderr)
        return 2
    save_profiles(kept)
    print(f"removed {args.name}")
    return 0


def check_backend(args: argparse.Namespace) -> int:
    from runtime.backends.profiles import backend_factory

    try:
        backend = backend_factory(args.backend)()
        try:
            backend.load_model("")
            print(backend.label)
            print(f"context: {backend.model_context_size('')} tokens per node")
            slots = getattr(backend, "total_slots", None)
            if slots is not None:
                print(f"slots: {slots} (one per node of a conversation keeps each node's cache)")
        finally:
            backend.close()
    except (InputError, BackendError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
