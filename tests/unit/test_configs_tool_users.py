"""`minibroker configs` for users (KIP-55): kafka-configs' combined entity, parsed without ZooKeeper."""

from __future__ import annotations

import argparse

import pytest

from broker.tools.configs_tool import _path, _quota_entity, _shown, add_parser


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["configs", "--zookeeper", "z:1", *argv])


def entity(*argv: str) -> list[tuple[str, str | None]]:
    args = parse(*argv, "--describe")
    return _quota_entity(args.entity_type, args.entity_names or [])


def test_names_and_defaults_pair_with_the_types_in_command_line_order() -> None:
    assert entity("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-default") == [("users", "alice"), ("clients", "<default>")]
    assert entity("--entity-type", "users", "--entity-default", "--entity-type", "clients",
                  "--entity-name", "app 1") == [("users", "<default>"), ("clients", "app%201")]
    # clients first, as kafka-configs allows: the user still leads the path.
    pairs = entity("--entity-type", "clients", "--entity-name", "c/1", "--entity-type", "users",
                   "--entity-name", "CN=bob")
    assert pairs == [("users", "CN%3Dbob"), ("clients", "c%2F1")]
    assert _path(pairs) == ("users", "CN%3Dbob/clients/c%2F1")
    assert _shown(pairs) == "user-principal 'CN=bob', client-id 'c/1'"
    assert _shown([("users", "<default>"), ("clients", "<default>")]) == "default user-principal, default client-id"


def test_a_type_without_a_name_means_all_for_describe() -> None:
    assert entity("--entity-type", "users") == [("users", None)]
    assert entity("--entity-type", "users", "--entity-name", "a", "--entity-type", "clients") == [
        ("users", "a"), ("clients", None)]


@pytest.mark.parametrize("argv", [
    ("--entity-type", "users", "--entity-type", "topics"),
    ("--entity-type", "users", "--entity-type", "users"),
])
def test_only_users_and_clients_combine(argv: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        entity(*argv)
