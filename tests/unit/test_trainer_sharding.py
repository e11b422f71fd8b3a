"""Sharding arithmetic with literals: exactly-once and equal steps, without TensorFlow."""

import random
from collections import Counter

import pytest
from sagetrain.errors import UserError
from sagetrain.trainer.sharding import (
    DataFile,
    Deal,
    FileSpan,
    ShardLevel,
    ShardPlan,
    balance_files,
    batch_sizes,
    check_has_records,
    check_records_per_rank,
    is_balanced,
    locate_span,
    plan_shard,
    record_span,
    records_through_step,
    steps_per_epoch,
)


def files(*sizes):
    return [DataFile(f"/data/part-{index}", size) for index, size in enumerate(sizes)]


def test_balance_deals_largest_first_to_lightest_bin():
    bins = balance_files(files(100, 10, 60, 50, 40), 2)
    assert [[item.size for item in group] for group in bins] == [[100, 40], [10, 60, 50]]
    assert [sum(item.size for item in group) for group in bins] == [140, 120]


def test_balance_is_deterministic_and_keeps_path_order_in_each_bin():
    listing = files(5, 5, 5, 5, 5, 5, 5)
    assert balance_files(listing, 3) == balance_files(list(reversed(listing)), 3)
    for group in balance_files(listing, 3):
        assert [item.path for item in group] == sorted(item.path for item in group)


def test_balance_gives_every_bin_a_file_even_with_empty_files():
    bins = balance_files(files(0, 0, 0, 7), 3)
    assert all(bins)


def test_balanced_means_every_bin_within_80_percent_of_the_heaviest_and_none_empty():
    assert is_balanced(balance_files(files(100, 80), 2))
    assert not is_balanced(balance_files(files(100, 79), 2))
    assert not is_balanced(balance_files(files(10, 10, 10), 2)), "20 vs 10 bytes"
    assert not is_balanced(balance_files(files(*[10] * 5), 2)), "30 vs 20 bytes"
    assert is_balanced(balance_files(files(*[10] * 9), 2)), "50 vs 40 bytes"
    assert not is_balanced(balance_files(files(500, 0), 2)), "a bin without bytes"
    assert not is_balanced(balance_files(files(0, 0), 2))


def test_uneven_file_deals_shard_by_record():
    # Three equal files on two ranks would give one rank twice the records of the other.
    listing = files(10, 10, 10)
    shards = [plan_shard(listing, index, 2) for index in range(2)]
    assert [(shard.level, shard.record_index, shard.record_count) for shard in shards] == [
        (ShardLevel.RECORD, 0, 2),
        (ShardLevel.RECORD, 1, 2),
    ]
    assert all(shard.files == tuple(listing) for shard in shards)
    # A big data file next to a (nearly) empty one: both ranks read both, so neither is left without data.
    shards = [plan_shard(files(9000, 300), index, 2) for index in range(2)]
    assert all(shard.level is ShardLevel.RECORD for shard in shards)


def test_every_file_in_exactly_one_shard():
    listing = files(9, 3, 7, 1, 1, 4, 8, 2)
    shards = [plan_shard(listing, index, 3) for index in range(3)]
    assert all(shard.level is ShardLevel.FILE for shard in shards)
    assert Counter(item for shard in shards for item in shard.files) == Counter(listing)


@pytest.mark.parametrize(("file_count", "ranks"), [(1, 2), (2, 3), (1, 3)])
def test_fewer_files_than_ranks_shards_by_record(file_count, ranks):
    listing = files(*([10] * file_count))
    shards = [plan_shard(listing, index, ranks) for index in range(ranks)]
    assert [shard.level for shard in shards] == [ShardLevel.RECORD] * ranks
    assert [(shard.record_index, shard.record_count) for shard in shards] == [
        (index, ranks) for index in range(ranks)
    ]
    assert all(shard.files == tuple(listing) for shard in shards)


@pytest.mark.parametrize(("total", "ranks"), [(10, 3), (7, 2), (3, 3), (100, 7), (1, 1), (2, 3), (0, 2)])
def test_record_spans_cover_every_record_once_in_member_order_within_one_of_each_other(total, ranks):
    spans = [record_span(total, index, ranks) for index in range(ranks)]
    assert [position for span in spans for position in span] == list(range(total))
    assert max(map(len, spans)) - min(map(len, spans)) <= 1


def test_a_record_span_can_be_empty_when_records_are_fewer_than_ranks():
    assert [len(record_span(2, index, 3)) for index in range(3)] == [0, 1, 1]
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        record_span(2, 3, 3)


def test_a_span_is_located_in_the_files_that_hold_it_and_no_others():
    counts = [4, 0, 3, 5]  # positions 0-3, none, 4-6, 7-11
    assert locate_span(counts, range(0, 4)) == FileSpan(first=0, stop=1, skip=0, records=4)
    assert locate_span(counts, range(4, 7)) == FileSpan(first=2, stop=3, skip=0, records=3)
    assert locate_span(counts, range(2, 9)) == FileSpan(first=0, stop=4, skip=2, records=7)
    assert locate_span(counts, range(11, 12)) == FileSpan(first=3, stop=4, skip=4, records=1)
    assert locate_span(counts, range(5, 5)) == FileSpan(0, 0, 0, 0)
    with pytest.raises(ValueError, match="past the files' 12 records"):
        locate_span(counts, range(10, 13))


@pytest.mark.parametrize("seed", range(20))
def test_located_spans_read_exactly_each_members_records(seed):
    """Reading files[first:stop], skipping ``skip`` records and taking ``records`` gives exactly the
    span's records, for every member of random listings (empty files, fewer records than members)."""
    rng = random.Random(seed)
    counts = [rng.choice([0, 1, 2, 5, 64]) for _ in range(rng.randint(1, 12))]
    records = [(file, index) for file, count in enumerate(counts) for index in range(count)]
    members = rng.randint(1, 9)
    read = []
    for member in range(members):
        span = record_span(len(records), member, members)
        where = locate_span(counts, span)
        in_files = [(file, index) for file in range(where.first, where.stop) for index in range(counts[file])]
        if where.records:
            assert where.skip < counts[where.first], "a file read only to be skipped"
            assert counts[where.stop - 1] > 0, "a trailing file without records"
        read += in_files[where.skip : where.skip + where.records]
    assert read == records


@pytest.mark.parametrize(
    ("records_per_rank", "batch"),
    [([52, 51], 8), ([16, 16, 15], 4), ([3, 2], 8), ([100, 40], 16), ([5], 5), ([10, 10], 3), ([17, 10], 4)],
)
def test_equal_steps_and_every_record_in_exactly_one_batch(records_per_rank, batch):
    steps = steps_per_epoch(records_per_rank, batch)
    for records in records_per_rank:
        sizes = batch_sizes(records, steps, batch)
        assert len(sizes) == steps
        assert sum(sizes) == records
        assert min(sizes) >= 1
        assert max(sizes) - min(sizes) <= 1, "records are spread evenly over the steps"
        assert max(sizes) == -(-records // steps)
    # The smallest shard never needs more than the per-rank batch.
    assert max(batch_sizes(min(records_per_rank), steps, batch)) <= batch


def test_records_are_spread_over_the_steps_larger_batches_first():
    assert steps_per_epoch([52, 51], 8) == 7
    assert batch_sizes(52, 7, 8) == (8, 8, 8, 7, 7, 7, 7)
    assert batch_sizes(51, 7, 8) == (8, 8, 7, 7, 7, 7, 7)
    # A larger shard gets somewhat larger batches, not one huge last batch (it used to be (16, 16, 68)).
    assert steps_per_epoch([100, 40], 16) == 3
    assert batch_sizes(100, 3, 16) == (34, 33, 33)
    assert batch_sizes(40, 3, 16) == (14, 13, 13)


def test_steps_cap_shortens_epochs_with_full_batches():
    assert steps_per_epoch([52, 51], 8, cap=3) == 3
    assert batch_sizes(52, 3, 8, take_all=False) == (8, 8, 8)
    with pytest.raises(ValueError, match="do not fill"):
        batch_sizes(20, 3, 8, take_all=False)


def test_steps_need_a_record_on_every_rank():
    with pytest.raises(ValueError):
        steps_per_epoch([3, 0], 2)


def test_empty_channel_and_too_few_records_are_user_errors_naming_the_channel():
    with pytest.raises(UserError, match=r"channel 'train' has no records"):
        check_records_per_rank("train", [0, 0])
    with pytest.raises(UserError, match=r"channel 'train' has 2 records, too few for 3 ranks \(rank 2"):
        check_records_per_rank("train", [1, 1, 0])
    check_records_per_rank("train", [1, 1, 1])


def test_an_evaluation_channel_needs_a_record_on_some_rank_only():
    check_has_records("validation", [0, 3, 0])
    with pytest.raises(UserError, match=r"^channel 'validation' has no records; put data files in it"):
        check_has_records("validation", [0, 0])


@pytest.mark.parametrize(
    ("records_per_rank", "steps", "batch", "take_all"),
    [((17, 10), 3, 4, True), ((19, 18), 5, 4, True), ((7,), 7, 1, True), ((40, 41, 40), 4, 8, False)],
)
def test_records_through_step_adds_up_every_ranks_batches(records_per_rank, steps, batch, take_all):
    dealt = [batch_sizes(records, steps, batch, take_all=take_all) for records in records_per_rank]
    for step in range(steps + 1):
        expected = sum(sum(sizes[:step]) for sizes in dealt)
        assert records_through_step(records_per_rank, steps, batch, step, take_all=take_all) == expected


def test_records_through_step_literals():
    # 17 and 10 records over 3 steps: batches of 6, 6, 5 and 4, 3, 3.
    assert [records_through_step((17, 10), 3, 4, step) for step in range(4)] == [0, 10, 19, 27]
    assert records_through_step((40, 41), 4, 8, 3, take_all=False) == 48


def greedy_deal(listing, members):
    """The deal's rule written out plainly: largest first (ties by path), each file to the bin with the
    fewest bytes, then the fewest files, then the lowest index; each bin in path order."""
    bins = [[] for _ in range(members)]
    for data_file in sorted(listing, key=lambda item: (-item.size, item.path)):
        lightest = min(
            range(members), key=lambda index: (sum(f.size for f in bins[index]), len(bins[index]), index)
        )
        bins[lightest].append(data_file)
    return tuple(tuple(sorted(group, key=lambda item: item.path)) for group in bins)


@pytest.mark.parametrize("seed", range(20))
def test_the_deal_and_each_members_plan_follow_the_plain_greedy_rule(seed):
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 5, 5, 5, 64, 1000, rng.randrange(2000)]) for _ in range(rng.randrange(1, 60))]
    listing = files(*sizes)
    rng.shuffle(listing)
    for members in (1, 2, 3, 4, 7):
        dealt = greedy_deal(listing, members)
        assert balance_files(listing, members) == dealt
        for index in range(members):
            plan = plan_shard(listing, index, members)
            if len(listing) >= members and is_balanced(dealt):
                assert (plan.level, plan.files) == (ShardLevel.FILE, dealt[index])
            else:
                assert (plan.level, plan.files) == (ShardLevel.RECORD, tuple(sorted(listing)))


def test_a_deal_names_a_member_for_every_file_and_plans_only_members():
    listing = tuple(sorted(files(5, 5, 5)))
    with pytest.raises(ValueError, match="owners must name one of 2 members"):
        Deal(listing, 2, (0, 1))
    with pytest.raises(ValueError, match="owners must name one of 2 members"):
        Deal(listing, 2, (0, 1, 2))
    with pytest.raises(ValueError, match="members must be at least 1"):
        Deal(listing, 0)
    with pytest.raises(ValueError, match=r"shard index 2 is outside 0..1"):
        Deal(listing, 2, (0, 1, 0)).plan(2)
    assert Deal(listing, 2, (0, 1, 0)).plan(0).files == (listing[0], listing[2])
    assert Deal(listing, 2).plan(1) == ShardPlan(ShardLevel.RECORD, listing, 1, 2)
