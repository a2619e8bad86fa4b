"""`kaflet reassign-partitions --throttle`: which replicas are throttled, as Kafka's tool computes it."""

from __future__ import annotations

from click.testing import CliRunner

from kaflet.cli.reassign_partitions import move_map, reassign_partitions, throttle_configs


def test_proposed_moves_throttle_current_replicas_as_leaders_and_new_ones_as_followers() -> None:
    current = {("a", 0): [1, 2], ("a", 1): [2, 3], ("b", 0): [1]}
    proposed = {("a", 0): [3, 4], ("a", 1): [2, 3, 4], ("b", 0): [1, 2]}
    moves = move_map({}, proposed, current)
    assert moves == {("a", 0): ({1, 2}, {3, 4}), ("a", 1): ({2, 3}, {4}), ("b", 0): ({1}, {2})}
    assert throttle_configs(moves) == {"a": ("0:1,0:2,1:2,1:3", "0:3,0:4,1:4"), "b": ("0:1", "0:2")}


def test_moves_in_progress_keep_their_sources() -> None:
    # a-0 is moving from [1, 2] to [2, 3] (replicas [2, 3, 1], adding 3, removing 1) and is
    # resubmitted towards [2, 4]: its sources stay [1, 2] (Kafka's calculateProposedMoveMap).
    ongoing = {("a", 0): ([2, 3, 1], [3], [1]), ("c", 5): ([7, 8], [8], [])}
    moves = move_map(ongoing, {("a", 0): [2, 4]}, {("a", 0): [2, 3, 1]})
    assert moves == {("a", 0): ({1, 2}, {4}), ("c", 5): ({7}, {8})}
    assert throttle_configs(moves) == {"a": ("0:1,0:2", "0:4"), "c": ("5:7", "5:8")}


def test_throttle_options_only_with_their_actions() -> None:
    runner = CliRunner()
    for args, option in ((["--verify", "--throttle", "1000"], "--throttle"),
                         (["--list", "--throttle", "1000"], "--throttle"),
                         (["--execute", "--preserve-throttles"], "--preserve-throttles")):
        out = runner.invoke(reassign_partitions, ["--bootstrap-server", "127.0.0.1:1", "--reassignment-json-file",
                                                  __file__, *args])
        assert out.exit_code == 2, out.output
        assert f'Option "{option}" can\'t be used with action' in out.output
    out = runner.invoke(reassign_partitions, ["--bootstrap-server", "127.0.0.1:1", "--list", "--throttle", "fast"])
    assert out.exit_code == 2 and "'fast' is not a valid integer" in out.output
