"""The random streams' table and seed function."""

from __future__ import annotations

import itertools

import pytest

from fl_uav.streams import Stream, stream_seed


def test_every_purpose_and_drone_of_a_thousand_drones_has_its_own_seed():
    # Arrange: every (purpose, drone) of one round, and the next round's
    keys = list(itertools.product(Stream, range(1000)))
    # Act
    seeds = {stream_seed(7, r, p, k) for r in (1, 2) for p, k in keys}
    # Assert
    assert len(seeds) == 2 * len(keys)


def test_a_runs_drone_is_not_the_next_runs_drone_shifted():
    # Act + Assert: seed 1's drone 0 is not seed 0's drone 1 (as seed + drone made them)
    assert stream_seed(1, 1, Stream.BATCHES, 0) != stream_seed(0, 1, Stream.BATCHES, 1)


@pytest.mark.parametrize('keys', [(-1, 0, 1, 0), (0, -1, 1, 0), (0, 0, 1, -1), (2**64, 0, 1, 0),
                                  (0, 2**32, 1, 0), (0, 0, 1, 2**32)])
def test_a_stream_key_out_of_range_is_refused_by_name(keys):
    # Arrange
    seed, round_index, purpose, index = keys
    # Act + Assert
    with pytest.raises(ValueError, match=r'stream_seed needs a seed in \[0, 2\*\*64\) and a '
                                         r'round and index in \[0, 2\*\*32\), got seed'):
        stream_seed(seed, round_index, Stream(purpose), index)
